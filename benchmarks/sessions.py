"""run.py's sections for sessions, pools and asyncio (registered in run.py's SECTIONS).

- ``session``: ``sb.run(["/bin/true"])`` in one live ``pysandbox.Sandbox()`` per backend
  against a plain ``subprocess.run``, alternated round by round (and with
  ``capture_output=True`` on both sides).
- ``pool``: the refill throughput of a sandbox (staged, then closed: what the pool's
  thread does for each command), then ``pool.run(["/bin/true"])`` with ``Pool(size=4)``
  per backend, paced at half the slowest refill rate, against a plain spawn.
- ``aio``: 64 concurrent ``aio.run`` (one-shot) and 64 concurrent ``sb.run`` in one
  ``aio.Sandbox``: the batch's wall time and the event loop's worst lag.
- ``session_soak``: many commands in one session and many pooled launches: what is
  left in this process and on the host (descriptors, children, mounts, temporary
  files), and whether the launcher's RSS stays flat.

Each section takes (report, cfg, deadline) like the others in run.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

import measure as M
from measure import Summary, ms, ratio

BACKENDS = ("native", "bwrap")
POOL_TARGET = {"native": 1.5, "bwrap": 2.0}   # pool.run / a plain spawn (issue 27)
TRUE = ["/bin/true"]
BATCH = 64
# what a sandbox could leave in /tmp or /var/tmp, if anything ever did (nothing of
# pysandbox writes there; a session's id and memfds are named psb-...) ...
OURS = re.compile(r"psb|pysandbox|bwrap", re.I)
# ... and what other users of a shared machine make there: the temporary directories
# of the test suite's and benchmarks' harnesses (tests/compat/harness.py, psb-bench-binds-,
# psbdiff-, ...), CI trees and other tools' (pysandbox-ci-, pysandbox-WORD-), pytest's
OTHERS = re.compile(r"^(pybwrap-compat-|psb-bench-binds-|psb-perf-|psb-floor-|psbdiff-|pysandbox-[a-z0-9]+-"
                    r"|pytest-of-)")


@dataclass
class Call:
    """A contender for measure.alternate that is not a launcher of contenders.py."""
    label: str
    launch: Callable[[], object]
    every: int = 1
    before: Callable[[], object] | None = None   # called untimed before each launch


def _policy():
    import pysandbox
    return pysandbox.Policy.default(network="deny")


def _sessions(report, opener) -> dict:
    """backend -> an open object (``opener(backend)``); a backend that cannot run is missing."""
    out = {}
    for backend in BACKENDS:
        try:
            out[backend] = opener(backend)
        except Exception as exc:  # reported, the run goes on
            why = f"{backend} session: {type(exc).__name__}: {exc}"
            report.missing.append(why)
            report.out(f"  (missing: {why})")
    return out


def _plain(capture: bool = False):
    return lambda: subprocess.run(TRUE, check=True, capture_output=capture)


# ---------------------------------------------------------------- session

def section_session(report, cfg: dict, deadline: float) -> None:
    rounds = cfg["session_rounds"]
    report.out(f"## Sessions: sb.run(['/bin/true']) in one live Sandbox ({rounds} rounds, alternated)")
    report.out()
    import pysandbox
    policy = _policy()
    boxes = _sessions(report, lambda b: pysandbox.Sandbox(policy, backend=b))
    try:
        pool = [Call("plain", _plain())]
        pool += [Call(f"session {b}", lambda sb=sb: sb.run(TRUE, check=True)) for b, sb in boxes.items()]
        pool += [Call("plain capture", _plain(True))]
        pool += [Call(f"session {b} capture", lambda sb=sb: sb.run(TRUE, check=True, capture_output=True))
                 for b, sb in boxes.items()]
        cpu: dict = {}
        samples = M.alternate(pool, rounds, warmup=20, deadline=deadline, cpu=cpu)
        report.samples["session"] = samples   # run.py --plot
    finally:
        for sb in boxes.values():
            sb.close()
    stats = {k: Summary.of(v) for k, v in samples.items()}
    cpu_mean = {k: statistics.fmean(v) for k, v in cpu.items()}
    report.results["session"] = {k: dict(vars(v), cpu_mean=cpu_mean[k]) for k, v in stats.items()}
    report.table(["contender", "median ms", "p90 ms", "p99 ms", "launcher CPU ms (mean)", "n"],
                 [[k, ms(s.median), ms(s.p90), ms(s.p99),
                   ms(cpu_mean[k]) + (" (this process only)" if k.startswith("session") else ""), s.n]
                  for k, s in stats.items()])
    rows = []
    for b in boxes:
        for suffix, base in (("", "plain"), (" capture", "plain capture")):
            a = stats[f"session {b}{suffix}"]
            rows.append([f"session {b}{suffix} / {base}", ratio(a.median, stats[base].median),
                         ratio(cpu_mean[f"session {b}{suffix}"], cpu_mean[base])])
    report.out("Ratios of medians of wall time (and of the launcher's mean CPU: for a session only this "
               "Python process, the command runs under the server; for plain, the reaped child too).")
    report.out()
    report.table(["ratio", "wall", "launcher CPU"], rows)
    for b in BACKENDS:
        for suffix in ("", " capture"):
            a, p = stats.get(f"session {b}{suffix}"), stats.get(f"plain{suffix}")
            report.target(f"session {b}{suffix} / plain{suffix} <= 1.2",
                          a.median / p.median if a and p else None, 1.2)
    _first_commands(report, policy, list(boxes), max(10, min(40, rounds // 10)), deadline)


def _first_commands(report, policy, backends: list, n: int, deadline: float) -> None:
    """Issue 27: a fresh sandbox's first command as fast as a later one. Per backend, n
    sandboxes, each: 20 ms idle, the first run, 20 ms idle, the second; no Sandbox.warm."""
    import pysandbox
    rows = []
    for b in backends:
        first: list = []
        second: list = []
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            with pysandbox.Sandbox(policy, backend=b) as sb:
                for out in (first, second):
                    time.sleep(0.02)
                    t0 = time.perf_counter()
                    sb.run(TRUE, check=True)
                    out.append(time.perf_counter() - t0)
        if first:
            f, s = statistics.median(first), statistics.median(second)
            rows.append([b, ms(f), ms(s), ratio(f, s), len(first)])
            report.target(f"first command {b} / second <= 1.2", f / s, 1.2)
    report.out("A fresh session's first command against its second (medians; 20 ms idle before each).")
    report.out()
    report.table(["backend", "first ms", "second ms", "first / second", "n"], rows)


# ---------------------------------------------------------------- pool

def _refill_rate(pysandbox, policy, backend: str, n: int) -> tuple[float, float]:
    """(sandboxes staged per second, staged and closed per second), ``n`` in a row."""
    stage = 0.0
    t0 = time.perf_counter()
    for _ in range(n):
        t1 = time.perf_counter()
        sb = pysandbox.Sandbox(policy, backend=backend)
        stage += time.perf_counter() - t1
        sb.close()
    return n / stage, n / (time.perf_counter() - t0)


def section_pool(report, cfg: dict, deadline: float) -> None:
    rounds, n = cfg["pool_rounds"], cfg["refill_n"]
    report.out(f"## Pool: pool.run(['/bin/true']) with Pool(size=4) at a steady rate ({rounds} rounds, "
               "alternated)")
    report.out()
    import pysandbox
    policy = _policy()
    rates = {}
    for backend in BACKENDS:
        try:
            rates[backend] = _refill_rate(pysandbox, policy, backend, n)
        except Exception as exc:  # reported, the run goes on
            report.missing.append(f"pool {backend}: {type(exc).__name__}: {exc}")
    report.out(f"Refill throughput: {n} sandboxes staged one after another (Sandbox(); then close(), "
               "as the pool's thread does for each command):")
    report.out()
    report.table(["backend", "staged / s", "staged + closed / s", "ms each (staged + closed)"],
                 [[b, f"{s:.0f}", f"{sc:.0f}", ms(1 / sc)] for b, (s, sc) in rates.items()])
    if not rates:
        report.target("pool native / plain <= 1.5", None, POOL_TARGET["native"])
        return
    pace = 0.5 * min(sc for _, sc in rates.values())   # calls/s: half the slowest refill
    pools = {b: pysandbox.Pool(policy, size=4, backend=b) for b in rates}
    waited = {b: 0 for b in pools}

    def call(b):
        pl = pools[b]
        if pl.stats()["ready"] == 0:
            waited[b] += 1
        pl.run(TRUE, check=True)

    def idle():
        """Until every pool is full again and has closed its used sandboxes (bounded): no
        refill competes with a measurement (the threads stage before they close, so full
        alone is not idle)."""
        end = time.monotonic() + 30
        for pl in pools.values():
            while not M.pool_idle(pl) and time.monotonic() < end:
                time.sleep(0.002)

    try:
        contenders = [Call("plain", _plain(), before=idle)] + \
                     [Call(f"pool {b}", lambda b=b: call(b), before=idle) for b in pools]
        samples = M.alternate(contenders, rounds, warmup=2, deadline=deadline, interval=1 / pace)
        report.samples["pool"] = samples   # run.py --plot
        stage_mean = {b: pl.stats()["stage_seconds_mean"] for b, pl in pools.items()}
    finally:
        for pl in pools.values():
            pl.close()
    stats = {k: Summary.of(v) for k, v in samples.items()}
    report.results["pool"] = dict(refill={b: dict(staged_per_s=s, cycle_per_s=sc) for b, (s, sc) in rates.items()},
                                  pace_per_s=pace, **{k: vars(v) for k, v in stats.items()})
    rows = []
    for k, s in stats.items():
        b = k.split()[-1]
        rows.append([k, ms(s.median), ms(s.p90), ms(s.p99), s.n,
                     ratio(s.median, stats["plain"].median),
                     waited.get(b, "-") if k != "plain" else "-",
                     ms(stage_mean[b]) if k != "plain" and stage_mean.get(b) else "-"])
    report.out(f"One round (a plain spawn and one pool.run per backend) every {1 / pace * 1e3:.0f} ms: "
               f"{pace:.0f} calls/s to each pool, half the slowest refill rate above; each call starts once "
               "every pool is full again and has closed its used sandboxes (no refill or close runs during a "
               "measurement).")
    report.out()
    report.table(["contender", "median ms", "p90 ms", "p99 ms", "n", "/ plain", "calls that found no "
                  "sandbox ready", "pool's mean stage ms"], rows)
    for b in BACKENDS:
        s = stats.get(f"pool {b}")
        limit = POOL_TARGET[b]
        report.target(f"pool {b} / plain <= {limit}", s.median / stats["plain"].median if s else None, limit)


# ---------------------------------------------------------------- asyncio

async def _batch(make) -> tuple[float, float]:
    """(wall seconds for BATCH concurrent ``make()`` coroutines, worst loop lag in seconds)."""
    worst = 0.0
    stop = False

    async def ticker():
        nonlocal worst
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t - 0.001)

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.005)
    t0 = time.perf_counter()
    await asyncio.gather(*(make() for _ in range(BATCH)))
    wall = time.perf_counter() - t0
    stop = True
    await tick
    return wall, worst


async def _aio_round(aio, policy, sessions: dict, out: dict) -> None:
    async def plain():
        proc = await asyncio.create_subprocess_exec(*TRUE)
        if await proc.wait() != 0:
            raise RuntimeError("plain /bin/true failed")

    kinds = [("asyncio subprocess (plain)", plain)]
    for b in BACKENDS:
        kinds.append((f"aio.run {b} (one-shot)", lambda b=b: aio.run(TRUE, policy=policy, backend=b, check=True)))
        if b in sessions:
            kinds.append((f"aio.Sandbox {b}: sb.run", lambda sb=sessions[b]: sb.run(TRUE, check=True)))
    for label, make in kinds:
        out.setdefault(label, []).append(await _batch(make))


def section_aio(report, cfg: dict, deadline: float) -> None:
    reps = cfg["aio_reps"]
    report.out(f"## asyncio: {BATCH} concurrent commands, wall time of the batch and the loop's worst lag "
               f"({reps} batches each, alternated)")
    report.out()
    from pysandbox import aio
    policy = _policy()
    out: dict = {}

    async def main():
        sessions = {}
        for b in BACKENDS:
            try:
                sessions[b] = await aio.Sandbox(policy, backend=b).start()
            except Exception as exc:  # reported, the run goes on
                report.missing.append(f"aio.Sandbox {b}: {type(exc).__name__}: {exc}")
        try:
            await _aio_round(aio, policy, sessions, {})   # warm-up
            for r in range(reps):
                if r >= 1 and time.monotonic() > deadline:
                    break
                await _aio_round(aio, policy, sessions, out)
        finally:
            for sb in sessions.values():
                await sb.close()

    asyncio.run(main())
    rows = []
    for label, res in out.items():
        walls, lags = [w for w, _ in res], [lag for _, lag in res]
        rows.append([label, ms(statistics.median(walls)), ms(statistics.median(walls) / BATCH),
                     ms(statistics.median(lags)), ms(max(lags)), len(res)])
    report.results["aio"] = {k: [dict(wall=w, lag=lag) for w, lag in v] for k, v in out.items()}
    report.table(["batch", "wall ms (median)", "ms per command", "loop lag ms (median of batch worst)",
                  "loop lag ms (worst)", "batches"], rows)
    report.out("Loop lag: a task sleeping 1 ms in a loop during the batch; its largest overshoot is how "
               "long the loop could not run anything else.")
    report.out()
    for b in BACKENDS:
        res = out.get(f"aio.Sandbox {b}: sb.run")
        report.target(f"loop lag (session {b}) <= 10 ms, median of batches' worst",
                      statistics.median(lag for _, lag in res) * 1e3 if res else None, 10)


# ---------------------------------------------------------------- soak

def _fds() -> frozenset:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            out.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:   # the descriptor listdir used
            pass
    return frozenset(out)


def _children() -> frozenset:
    out = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return frozenset(out)


# Where a sandbox's setup could leak a mount onto the host (its setup base, the kernel
# filesystems it remounts, the root): mounts elsewhere are other programs' on a busy host.
_SETUP_POINTS = frozenset({"/", "/tmp", "/run", "/mnt", "/var/tmp", "/proc", "/dev", "/sys"})


def _mount_lines() -> int:
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if line.split(" ")[4] in _SETUP_POINTS)


def _tmp() -> frozenset:
    out = set()
    for d in ("/tmp", "/var/tmp"):
        try:
            out.update(os.path.join(d, name) for name in os.listdir(d))
        except OSError:
            pass
    return frozenset(out)


def _state() -> dict:
    return dict(fds=_fds(), children=_children(), mounts=_mount_lines(), tmp=_tmp())


def _settled(before: dict, limit: float = 5.0) -> dict:
    """The state once exiting processes are gone (bounded wait)."""
    end = time.monotonic() + limit
    while True:
        now = _state()
        if (not now["children"] - before["children"] and now["mounts"] <= before["mounts"]) \
                or time.monotonic() > end:
            return now
        time.sleep(0.05)


def _soak(label: str, open_, run_one, count: int, every: int) -> dict:
    """``count`` calls of ``run_one(obj)`` on ``obj = open_()``, then close it: the leak
    counts, and RSS sampled every ``every`` calls."""
    open_().close()   # the program memfds are made once per process (pysandbox/memfd.py), kept
    before = _state()
    obj = open_()
    rss = []
    try:
        for i in range(count):
            run_one(obj)
            if i == 49:
                inside = _state()   # the session's own descriptors are open from here on
            if (i + 1) % every == 0:
                rss.append(M.rss_kib())
        inside_end = _state()
    finally:
        obj.close()
    after = _settled(before)
    new_tmp = sorted(after["tmp"] - before["tmp"])
    return dict(label=label, count=count, rss=rss,
                fds_new=sorted(after["fds"] - before["fds"]), fds_growth_open=len(inside_end["fds"] - inside["fds"]),
                children_new=sorted(after["children"] - before["children"]),
                mounts=(before["mounts"], after["mounts"]), tmp_new=new_tmp,
                tmp_ours=[p for p in new_tmp if OURS.search(os.path.basename(p))
                          and not OTHERS.match(os.path.basename(p))])


def section_session_soak(report, cfg: dict, deadline: float) -> None:
    count, pooled = cfg["session_soak"], cfg["pool_soak"]
    every = min(1000, max(1, count // 5))
    report.out(f"## Soak: {count:,} commands in one session, {pooled:,} pooled launches, per backend")
    report.out()
    import pysandbox
    policy = _policy()
    results = []
    for b in BACKENDS:
        try:
            results.append(_soak(f"session {b}", lambda b=b: pysandbox.Sandbox(policy, backend=b),
                                 lambda sb: sb.run(TRUE, check=True), count, every))
            results.append(_soak(f"pool {b}", lambda b=b: pysandbox.Pool(policy, size=4, backend=b),
                                 lambda pl: pl.run(TRUE, check=True), pooled, max(1, pooled // 5)))
        except Exception as exc:  # reported, the run goes on
            report.missing.append(f"soak {b}: {type(exc).__name__}: {exc}")
    rows = []
    for r in results:
        rss = r["rss"]
        warm, last = (rss[1], rss[-1]) if len(rss) >= 2 else (rss[0], rss[0])
        flat = abs(last - warm) <= max(0.10 * warm, 5 * 1024)
        r["rss_flat"] = flat
        growth = r["fds_growth_open"] if r["label"].startswith("session") else "-"
        rows.append([r["label"], f"{r['count']:,}", len(r["fds_new"]), growth,
                     len(r["children_new"]), f"{r['mounts'][0]} -> {r['mounts'][1]}",
                     f"{len(r['tmp_ours'])} ({len(r['tmp_new'])})",
                     " ".join(str(k // 1024) for k in rss), "flat" if flat else "GROWS"])
    report.results["session_soak"] = results
    report.table(["run", "commands", "new fds after close", "fd growth while open", "children left",
                  "host mountinfo lines at setup points", "new /tmp, /var/tmp entries: ours (all)",
                  f"RSS MiB every {every:,} (pool: every {max(1, pooled // 5):,})", "RSS"], rows)
    report.out("New fds and children: this process's, compared before opening and after closing (fd "
               "growth while open: after 50 commands and at the end, sessions only: a pool's count varies with how many sandboxes are staged). 'ours' are new entries named like "
               "something of a sandbox (psb, pysandbox, bwrap), less the temporary directories of "
               "the test and benchmark harnesses and CI trees (pybwrap-compat-, psbdiff-, pysandbox-WORD-, ...); 'all' includes other users of the machine. RSS is flat when the last sample is within 10% (or 5 MiB) of the second.")
    report.out()
    for r in results:
        if r["tmp_ours"] or r["fds_new"]:
            report.out(f"- {r['label']}: new fds {r['fds_new'][:5]}, new tmp entries {r['tmp_ours'][:5]}")
    for what, key in (("descriptor", "fds_new"), ("process", "children_new"), ("tmp file", "tmp_ours")):
        report.target(f"soak: no {what} left (count)",
                      float(sum(len(r[key]) for r in results)) if results else None, 0)
    report.target("soak: no mount left (mountinfo lines added)",
                  float(sum(max(0, r["mounts"][1] - r["mounts"][0]) for r in results)) if results else None, 0)
    report.target("soak: RSS flat (runs that grew)", float(sum(not r["rss_flat"] for r in results))
                  if results else None, 0)
