#!/usr/bin/env python3
"""Where a pysandbox launch spends its time.

    python benchmarks/profile_launch.py [--backend native] [--network deny] [--binds N]
                                        [-n LAUNCHES] [--perf] [--steps]

Prints (1) a phase breakdown of ``pysandbox.run([/bin/true])`` measured without a
profiler: Python work before the backend's spawn, the spawn itself (clone, setup,
until exec), and the wait (the command, the sandbox's exit, the reap); (2) the top
of a cProfile of the same launches; (3) with ``--perf``, the top kernel and user
symbols of ``perf record`` on this process and its children (needs perf); with
``--steps`` (native only), instead of (2): the per-step timings inside the C child
(pysandbox/backends/native/native_stamps.py), medians over the launches, each step against
the stamp before it, and the procfs covers, /dev and the pivot summed up.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders as C  # noqa: E402


def phases(backend_name: str, policy, count: int) -> None:
    import pysandbox
    from pysandbox.backends import get_backend

    backend = get_backend(backend_name)
    spawn_times: list[float] = []
    real_spawn = backend.spawn

    def timed_spawn(plan, launch):
        t0 = time.perf_counter()
        try:
            return real_spawn(plan, launch)
        finally:
            spawn_times.append(time.perf_counter() - t0)

    backend.spawn = timed_spawn   # instance attribute: shadows the method for this run only
    try:
        popen, wait = [], []
        for _ in range(count):
            t0 = time.perf_counter()
            proc = pysandbox.Popen([C.TRUE], policy=policy, backend=backend_name)
            t1 = time.perf_counter()
            rc = proc.wait()
            t2 = time.perf_counter()
            if rc != 0:
                raise RuntimeError(f"/bin/true exited {rc}")
            popen.append(t1 - t0)
            wait.append(t2 - t1)
    finally:
        del backend.spawn
    med = statistics.median
    before = [p - s for p, s in zip(popen, spawn_times)]
    print(f"phase breakdown over {count} launches (medians, ms):")
    print(f"  Popen() before spawn (policy/plan/backend choice, Popen setup): {med(before) * 1e3:.3f}")
    print(f"  backend.spawn (until exec):                                      {med(spawn_times) * 1e3:.3f}")
    print(f"  wait (command, exit, reap):                                      {med(wait) * 1e3:.3f}")
    print(f"  whole launch:                                                    "
          f"{med([a + b for a, b in zip(popen, wait)]) * 1e3:.3f}")
    print()


def profile(contender, count: int, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(count):
        contender.launch()
    prof.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
        text = out.getvalue()
        print(f"cProfile, {count} launches, by {key}:")
        print(text[text.find("   ncalls"):].rstrip())
        print()


def step_table(contender, count: int) -> None:
    from pysandbox.backends.native import native_stamps
    runs: list = []
    native_stamps.listeners.append(runs.append)
    try:
        for _ in range(count):
            contender.launch()
    finally:
        native_stamps.listeners.remove(runs.append)
    by_label: dict = {}
    for got in runs:
        for label, dt in got:
            by_label.setdefault(label, []).append(dt)
    med = statistics.median
    print(f"steps inside the native launch, {len(runs)} launches (medians, ms since the previous stamp):")
    groups: dict = {}
    for label, dts in by_label.items():
        print(f"  {med(dts):7.3f}  {label}")
        dest = label.split(" ")[-1]
        group = ("procfs covers" if " BIND /newroot/proc/" in label else
                 "/dev" if dest.startswith("/newroot/dev") else None)
        if group:
            groups[group] = groups.get(group, 0.0) + med(dts)
    whole = [sum(dt for _, dt in got[1:]) for got in runs]
    for name, total in groups.items():
        print(f"  sum of medians, {name}: {total:.3f}")
    print(f"  whole (launcher's clone to its EOF): {med(whole):.3f}")
    print()


def perf(contender, count: int, top: int) -> None:
    exe = shutil.which("perf")
    if exe is None:
        print("perf not found; skipped")
        return
    with tempfile.TemporaryDirectory(prefix="psb-perf-") as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.Popen([exe, "record", "-q", "-e", "cpu-clock", "-F", "4000", "-g",
                                "-p", str(os.getpid()), "-o", data],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)   # let perf attach
        try:
            for _ in range(count):
                contender.launch()
        finally:
            rec.send_signal(signal.SIGINT)
            try:
                rec.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rec.kill()
                rec.wait()
        report = subprocess.run([exe, "report", "-i", data, "--stdio", "--children", "--sort", "sym",
                                 "-g", "none", "--percent-limit", "2"],
                                capture_output=True, text=True)
        lines = [ln for ln in report.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
        print(f"perf record -p {os.getpid()} (children included), {count} launches; "
              f"children% / self% / symbol:")
        print("\n".join(lines[:top]))
        print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="native", choices=("native", "bwrap"))
    ap.add_argument("--network", default="deny", choices=C.NETWORKS)
    ap.add_argument("--binds", type=int, default=0)
    ap.add_argument("-n", "--launches", type=int, default=300)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--steps", action="store_true", help="per-step timings inside the C child (native)")
    args = ap.parse_args(argv)
    import pysandbox
    with C.BindDirs(args.binds) as dirs:
        policy = pysandbox.Policy.default(network=args.network, ro=dirs.first(args.binds))
        contender = C.make("native" if args.backend == "native" else "bwrap-backend",
                           args.network, dirs.first(args.binds))
        for _ in range(10):
            contender.launch()
        phases(args.backend, policy, args.launches)
        if args.steps:
            step_table(contender, args.launches)
        else:
            profile(contender, args.launches, args.top)
        if args.perf:
            perf(contender, args.launches, args.top * 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
