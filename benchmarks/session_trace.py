#!/usr/bin/env python3
"""Where a session command's time goes, against a plain spawn, from the scheduler's view.

    python benchmarks/session_trace.py [--runs 40] [--backend native]   (root; needs perf)

Runs ``Sandbox.run(["/bin/true"])`` and ``subprocess.run(["/bin/true"])`` back to back,
each under ``perf record -a`` of the scheduler's fork/exec/exit/wakeup events and the
entry and exit of the few system calls it reads, and prints per command the time between
the phases:

- session: the launcher's SPAWN ``sendmsg`` -> the server's ``recvmsg`` of it -> its
  ``sendmsg`` to the armed keeper -> the keeper's ``recvmsg`` (or, on the fork path, the
  server's fork of the keeper) -> the keeper's clone of the command -> ``execve`` -> the exec done -> the command's exit ->
  the keeper's wake-up -> the launcher's wake-up -> its ``recv`` returning;
- plain: the launcher's ``vfork``/``clone`` -> ``execve`` -> exec done -> exit -> the
  launcher's wake-up -> its ``wait4`` returning;

and the launcher's own time between one command's end and the next one's start (the
Python work of a call: Popen, the frame, the channel). The minimum of each difference
over the runs is the uncontended cost (a busy machine only adds to it); q1 and the
median show the spread. No figure here is a ratio of the benchmark table: this says
which step costs, ``benchmarks/run.py --sections session`` says how much in all.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

SCHED = "sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit,sched:sched_wakeup"
LINE = re.compile(r"\s*(\S+)\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s*(.*)")
NR = {"sendmsg": 46, "recvmsg": 47, "recvfrom": 45, "vfork": 58, "clone": 56, "clone3": 435, "wait4": 61, "waitid": 247,
      "execve": 59}
# Only the system calls the phases are read from: every call of every process would keep
# perf itself busy on one of the CPUs, and a fork placed there waits for perf's time slice
# (measured: ~3 ms of a session command's keeper on 2 CPUs).
CALLS = " || ".join(f"id == {n}" for n in NR.values())

# The traced program: warms both paths, then runs ``runs`` commands of one kind.
DRIVER = r'''
import subprocess, sys
import pysandbox
from pysandbox.session import Sandbox
kind, runs, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with Sandbox(pysandbox.Policy.default(), backend) as sb:
    for _ in range(20):
        sb.run(["/bin/true"])
        subprocess.run(["/bin/true"])
    for _ in range(runs):
        sb.run(["/bin/true"]) if kind == "session" else subprocess.run(["/bin/true"])
'''


def _nr(e, *names) -> bool:
    return any(e[4].startswith(f"NR {NR[n]} ") for n in names)


def _child(e) -> int:
    return int(re.search(r"child_pid=(\d+)", e[4]).group(1))


def record(kind: str, runs: int, backend: str, tmp: str) -> list:
    """The trace of one driver run: (comm, tid, time us, event, details) per event."""
    data = os.path.join(tmp, f"{kind}.data")
    subprocess.run(["perf", "record", "-q", "-o", data, "-a", "-e", SCHED, "-e", "raw_syscalls:sys_enter",
                    "--filter", CALLS, "-e", "raw_syscalls:sys_exit", "--filter", CALLS, "--", sys.executable, "-c",
                    DRIVER, kind, str(runs), backend], check=True, stdout=subprocess.DEVNULL)
    text = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                          check=True, capture_output=True, text=True).stdout
    events = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            events.append((m[1], int(m[3]), float(m[4]) * 1e6, m[5].split(":")[1], m[6]))
    return events


def _launcher(events) -> int:
    for e in events:
        if e[3] == "sched_process_exec" and os.path.basename(sys.executable) in e[4]:
            return int(re.search(r" pid=(\d+)", e[4]).group(1))
    raise SystemExit("the driver's exec is not in the trace")


def session_phases(events, runs: int) -> list[dict]:
    """Per command: its process is the one that execs /bin/true after the SPAWN; its
    keeper the process that forked it; the server the one that forked the keeper."""
    la = _launcher(events)
    forked = {_child(e): e for e in events if e[3] == "sched_process_fork"}
    starts = [i for i, e in enumerate(events) if e[1] == la and e[3] == "sys_enter" and _nr(e, "sendmsg")]
    out = []
    for s in starts[-runs:]:
        t0, ph = events[s][2], {}
        cmd = next((e[1] for e in events[s:] if e[3] == "sched_process_exec" and "/bin/true" in e[4]), None)
        keeper = forked[cmd][1] if cmd in forked else None
        if keeper is None or keeper not in forked:
            continue
        server = forked[keeper][1]
        # the armed path (psb_session.c arm): the server's sendmsg of the frame to the
        # keeper, which it forked before (late: after this SPAWN was sent, the frame waited)
        armed = any(e[1] == server and e[3] == "sys_enter" and _nr(e, "sendmsg")
                    for e in events[s:] if e[2] < forked[cmd][2])
        if armed:
            late = forked[keeper][2] > t0
            for e in events[s:]:
                if e[1] == server and e[3] == "sys_exit" and _nr(e, "recvmsg") and not ph:
                    ph["the server received the frame"] = e[2] - t0
                elif e[1] == server and e[3] == "sys_enter" and _nr(e, "sendmsg") and ph:
                    ph["the server sent it to the armed keeper"] = e[2] - t0
                elif e[1] == keeper and e[3] == "sys_exit" and _nr(e, "recvmsg"):
                    ph["the keeper received it"] = e[2] - t0
                    break
            path = "armed keeper, forked after the SPAWN was sent" if late else "armed keeper"
        else:
            path = "the keeper forked for it"
            ph["the server forked the keeper"] = forked[keeper][2] - t0
        ph["the keeper cloned the command"] = forked[cmd][2] - t0
        for e in events[s:]:
            if e[1] == cmd and e[3] == "sys_enter" and _nr(e, "execve"):
                ph["execve entered"] = e[2] - t0
            elif e[1] == cmd and e[3] == "sched_process_exec":
                ph["exec done"] = e[2] - t0
            elif e[1] == cmd and e[3] == "sched_process_exit":
                ph["the command exited"] = e[2] - t0
            elif "the command exited" in ph and e[3] == "sched_wakeup" and f"pid={keeper} " in e[4] \
                    and "the keeper woke" not in ph:
                ph["the keeper woke"] = e[2] - t0
            elif "the command exited" in ph and e[3] == "sched_wakeup" and f"pid={la} " in e[4]:
                ph["the launcher woke"] = e[2] - t0
            elif "the command exited" in ph and e[1] == la and e[3] == "sys_exit" and _nr(e, "recvfrom"):
                ph["its recv returned"] = e[2] - t0
                break
        out.append((path, ph))
    return out


def plain_phases(events, runs: int) -> list[dict]:
    la = _launcher(events)
    starts = [i for i, e in enumerate(events)
              if e[1] == la and e[3] == "sys_enter" and _nr(e, "vfork", "clone", "clone3")]
    out = []
    for s in starts[-runs:]:
        t0, ph, cmd = events[s][2], {}, None
        for e in events[s:]:
            if e[3] == "sched_process_fork" and e[1] == la and cmd is None:
                cmd = _child(e)
                ph["cloned"] = e[2] - t0
            elif cmd and e[1] == cmd and e[3] == "sys_enter" and _nr(e, "execve"):
                ph["execve entered"] = e[2] - t0
            elif cmd and e[1] == cmd and e[3] == "sched_process_exec":
                ph["exec done"] = e[2] - t0
            elif cmd and e[1] == cmd and e[3] == "sched_process_exit":
                ph["the command exited"] = e[2] - t0
            elif "the command exited" in ph and e[3] == "sched_wakeup" and f"pid={la} " in e[4]:
                ph["the launcher woke"] = e[2] - t0
            elif "the command exited" in ph and e[1] == la and e[3] == "sys_exit" and _nr(e, "wait4", "waitid"):
                ph["its wait returned"] = e[2] - t0
                break
        out.append(ph)
    return out


def between(events, runs: int, start: tuple, end: tuple) -> list[float]:
    """The launcher's time from one command's end (``end`` returned) to the next start."""
    la, gaps, last = _launcher(events), [], None
    for e in events:
        if e[1] != la:
            continue
        if e[3] == "sys_enter" and _nr(e, *start) and last is not None:
            gaps.append(e[2] - last)
            last = None
        elif e[3] == "sys_exit" and _nr(e, *end):
            last = e[2]
    return gaps[-runs:]


def _row(label: str, values: list[float]) -> str:
    v = sorted(values)
    return f"  {label:58s} {v[0]:8.1f} {v[len(v) // 4]:8.1f} {statistics.median(v):8.1f}"


def report(name: str, phases: list[dict], gaps: list[float]) -> None:
    keys = []
    for ph in phases:
        keys += [k for k in ph if k not in keys]
    print(f"{name} ({len(phases)} commands), us:{'min':>44s} {'q1':>8s} {'median':>8s}")
    prev = None
    for k in keys:
        d = [ph[k] - (ph[prev] if prev else 0) for ph in phases if k in ph and (prev is None or prev in ph)]
        if d:
            print(_row(f"{prev or 'start'} -> {k}", d))
        prev = k
    total = [ph[keys[-1]] for ph in phases if keys[-1] in ph]
    print(_row("start -> end", total))
    print(_row("the launcher, one command's end -> the next start (Python)", gaps))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--backend", default="native", choices=("native", "bwrap"))
    args = ap.parse_args(argv)
    if shutil.which("perf") is None or os.geteuid() != 0:
        print("needs root and perf (linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="psb-trace-") as tmp:
        ev = record("session", args.runs, args.backend, tmp)
        phases = session_phases(ev, args.runs)
        gaps = between(ev, args.runs, ("sendmsg",), ("recvfrom",))
        for path in dict.fromkeys(p for p, _ in phases):
            report(f"session command, {path}", [ph for p, ph in phases if p == path], gaps)
        ev = record("plain", args.runs, args.backend, tmp)
        report("plain subprocess.run", plain_phases(ev, args.runs),
               between(ev, args.runs, ("vfork", "clone", "clone3"), ("wait4", "waitid")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
