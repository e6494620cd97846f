#!/usr/bin/env python3
"""CPU a command costs, one-shot against pooled: the bound on a pool's throughput when
every CPU is busy.

    python benchmarks/pool_cpu.py [--runs 200] [--size 4]

For each backend, ``--runs`` x ``pysandbox.run(["/bin/true"])``, then the same count of
``Pool(size).run`` in a pool opened and closed inside the measurement; CPU is this
process's plus every reaped descendant's (``getrusage``: the launcher, each sandbox's
processes, the pool's stagings and closes). A pooled sandbox serves one command and is
staged by a whole launch, so it costs more CPU than a one-shot command; with more
threads than CPUs (``benchmarks/run.py --sections throughput``, 4 threads) the pool's rate
cannot exceed one-shot's rate divided by this ratio.
"""

from __future__ import annotations

import argparse
import resource
import time


def _cpu() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--size", type=int, default=4)
    args = ap.parse_args(argv)
    import pysandbox
    from pysandbox.pool import Pool
    policy = pysandbox.Policy.default()
    print("| backend | one-shot CPU ms/cmd | pool CPU ms/cmd | pool / one-shot (CPU) | one-shot wall ms | pool wall ms |")
    print("|---|---|---|---|---|---|")
    for backend in ("native", "bwrap"):
        pysandbox.run(["/bin/true"], policy=policy, backend=backend, check=True)
        cpu, wall = _cpu(), time.perf_counter()
        for _ in range(args.runs):
            pysandbox.run(["/bin/true"], policy=policy, backend=backend, check=True)
        one, one_wall = (_cpu() - cpu) / args.runs, (time.perf_counter() - wall) / args.runs
        cpu, wall = _cpu(), time.perf_counter()
        with Pool(policy, size=args.size, backend=backend) as pool:
            for _ in range(args.runs):
                pool.run(["/bin/true"], check=True)
        pooled, pooled_wall = (_cpu() - cpu) / args.runs, (time.perf_counter() - wall) / args.runs
        print(f"| {backend} | {one * 1e3:.2f} | {pooled * 1e3:.2f} | {pooled / one:.2f} | {one_wall * 1e3:.2f} | "
              f"{pooled_wall * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
