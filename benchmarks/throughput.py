"""run.py's ``throughput`` section: launches per second from 1, 2 and 4 threads.

Contenders, each running /bin/true from the same threads: plain ``subprocess.run``, the
one-shot launchers of contenders.py (``native``, ``bwrap-backend``, raw ``bwrap``), and
per backend a live session (one ``pysandbox.Sandbox`` shared by the threads: its
commands run concurrently in it) and a warm pool (``pysandbox.Pool(size=4)``: a fresh
sandbox per command, so its rate is bounded by how fast sandboxes are staged). Then
back to back from one thread: N ``pool.run`` against N one-shot ``pysandbox.run`` per
backend (the pool full before the first; what a new user would try). Every contender
of one thread count is measured before the next count, in one run, so the ratios are
side by side; the machine's load average is printed with them.

Targets (issue 27): the pool's rate at least the one-shot rate of its backend, from 4
threads and back to back.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

import measure as M

BACKENDS = ("native", "bwrap")
TRUE = ["/bin/true"]
ONE_SHOT = {"native": "native", "bwrap": "bwrap-backend"}   # contenders.py's name of a backend's one-shot
POOL_SIZE = 4


@dataclass
class Rate:
    name: str
    launch: Callable[[], object]


def _full(pool, limit: float = 30.0) -> None:
    """Until ``pool`` has every sandbox ready and none left to close (bounded): no staging
    or closing is left over from the previous measurement."""
    end = time.monotonic() + limit
    while not M.pool_idle(pool) and time.monotonic() < end:
        time.sleep(0.002)


def _contenders(report, available) -> tuple[list[Rate], list]:
    """(the contenders, the sessions and pools to close)."""
    import pysandbox
    policy = pysandbox.Policy.default(network="deny")
    out = [Rate(c.name, c.launch) for c in (available(report, n, "deny") for n in
                                            ("plain", "native", "bwrap-backend", "bwrap")) if c]
    opened: list = []
    for b in BACKENDS:
        try:
            sb = pysandbox.Sandbox(policy, backend=b)
            opened.append(sb)
            pl = pysandbox.Pool(policy, size=POOL_SIZE, backend=b)
            opened.append(pl)
        except Exception as exc:  # reported, the run goes on
            why = f"throughput {b} session/pool: {type(exc).__name__}: {exc}"
            report.missing.append(why)
            report.out(f"  (missing: {why})")
            continue
        out.append(Rate(f"session {b}", lambda sb=sb: sb.run(TRUE, check=True)))
        out.append(Rate(f"pool {b}", lambda pl=pl: pl.run(TRUE, check=True)))
    return out, opened


def _back_to_back(report, cfg: dict, deadline: float) -> dict:
    """backend -> (one-shot seconds, pool seconds) for cfg['back_to_back'] runs in a row."""
    import pysandbox
    n = cfg["back_to_back"]
    policy = pysandbox.Policy.default(network="deny")
    out = {}
    for b in BACKENDS:
        if time.monotonic() > deadline:
            break
        try:
            with pysandbox.Pool(policy, size=POOL_SIZE, backend=b) as pl:
                _full(pl)
                t0 = time.perf_counter()
                for _ in range(n):
                    pl.run(TRUE, check=True)
                pooled = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(n):
                pysandbox.run(TRUE, policy=policy, backend=b, check=True)
            out[b] = (time.perf_counter() - t0, pooled)
        except Exception as exc:  # reported, the run goes on
            report.missing.append(f"back to back {b}: {type(exc).__name__}: {exc}")
    return out


def section_throughput(report, cfg: dict, deadline: float, available) -> None:
    threads = cfg["threads"]
    report.out(f"## Throughput: launches/s with {', '.join(map(str, threads))} threads "
               f"({cfg['per_thread']} launches a thread, network deny; load average at start "
               f"{os.getloadavg()[0]:.2f})")
    report.out()
    rates: dict = {}
    contenders, opened = _contenders(report, available)
    try:
        for t in threads:
            for c in contenders:
                if time.monotonic() > deadline:
                    break
                for o in opened:
                    if hasattr(o, "stats"):
                        _full(o)
                rates[(c.name, t)] = M.threaded_rate(c.launch, t, cfg["per_thread"])
    finally:
        for o in opened:
            o.close()
    report.results["throughput"] = {f"{k[0]}/{k[1]}": v for k, v in rates.items()}
    rows = []
    for c in contenders:
        row = [c.name]
        for t in threads:
            r, p = rates.get((c.name, t)), rates.get(("plain", t))
            row.append(f"{r:.0f} ({r / p:.2f})" if r and p else "n/a")
        rows.append(row)
    report.out("launches/s (and / plain's rate from the same number of threads); a pool run stages a fresh "
               f"sandbox per command (Pool(size={POOL_SIZE}), full before each measurement).")
    report.out()
    report.table(["contender"] + [f"{t} thread{'s' if t > 1 else ''}" for t in threads], rows)
    top = max(threads)
    for b in BACKENDS:
        pool, one = rates.get((f"pool {b}", top)), rates.get((ONE_SHOT[b], top))
        report.target(f"pool {b} / one-shot {b} launches/s from {top} threads >= 1",
                      pool / one if pool and one else None, 1.0, lower_is_better=False)
    timed = _back_to_back(report, cfg, deadline)
    n = cfg["back_to_back"]
    report.out(f"{n} back to back from one thread (the pool full before the first; load average now "
               f"{os.getloadavg()[0]:.2f}):")
    report.out()
    report.table(["backend", "one-shot s", "pool s", "one-shot / pool"],
                 [[b, f"{one:.2f}", f"{pooled:.2f}", f"{one / pooled:.2f}"] for b, (one, pooled) in timed.items()])
    report.results["back_to_back"] = {b: dict(one_shot_s=one, pool_s=pooled) for b, (one, pooled) in timed.items()}
    for b in BACKENDS:
        v = timed.get(b)
        report.target(f"{n} back to back: one-shot {b} time / pool {b} time >= 1", v[0] / v[1] if v else None,
                      1.0, lower_is_better=False)
