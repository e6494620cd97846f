"""Timing helpers: contenders alternated round by round, percentiles, RSS, threads.

Contenders are interleaved (each round runs every contender once, the order
rotating) so that drift in the machine's load hits all of them alike; only ratios
measured in one such run are compared.
"""

from __future__ import annotations

import array
import math
import os
import resource
import statistics
import threading
import time
from dataclasses import dataclass


@dataclass
class Summary:
    n: int
    median: float   # seconds
    p90: float
    p99: float
    mean: float

    @classmethod
    def of(cls, samples: list[float]) -> "Summary":
        if not samples:
            raise ValueError("no samples")
        return cls(len(samples), statistics.median(samples), percentile(samples, 90),
                   percentile(samples, 99), statistics.fmean(samples))


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile (a sample that was actually measured)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it reaped (their reaped
    children included): what a launch costs in CPU, whatever else loads the machine."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def alternate(contenders, rounds: int, warmup: int = 2, deadline: float | None = None,
              cpu: dict | None = None, interval: float | None = None) -> dict:
    """Run every contender once per round, rotating the order; return label -> samples (s).

    Stops early (with at least 3 rounds) when ``deadline`` (a time.monotonic value) passes.
    With ``cpu``, also fills label -> CPU seconds of each launch (see cpu_seconds).
    With ``interval``, a round starts at least ``interval`` seconds after the previous
    one (a steady rate, e.g. one a background refill can keep up with). A contender
    with a ``before`` callable has it called, untimed, before each of its launches.
    """
    samples = {c.label: [] for c in contenders}
    for _ in range(warmup):
        for c in contenders:
            c.launch()
    n = len(contenders)
    next_round = time.monotonic()
    for r in range(rounds):
        if deadline is not None and r >= 3 and time.monotonic() > deadline:
            break
        if interval:
            pause = next_round - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            next_round = max(next_round, time.monotonic()) + interval
        for i in range(n):
            c = contenders[(r + i) % n]
            if r % c.every:
                continue
            if getattr(c, "before", None) is not None:
                c.before()
            c0 = cpu_seconds() if cpu is not None else 0.0
            t0 = time.perf_counter()
            c.launch()
            samples[c.label].append(time.perf_counter() - t0)
            if cpu is not None:
                cpu.setdefault(c.label, []).append(cpu_seconds() - c0)
    return samples


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def back_to_back(launch, count: int) -> array.array:
    """``count`` launches in a row; the duration of each, in order. The samples go to a
    preallocated C array, so recording them allocates nothing (RSS growth is the launcher's)."""
    out = array.array("d", bytes(8 * count))
    for i in range(count):
        t0 = time.perf_counter()
        launch()
        out[i] = time.perf_counter() - t0
    return out


def threaded_rate(launch, threads: int, per_thread: int) -> float:
    """Launches per second with ``threads`` threads each launching ``per_thread`` times.

    Raises:
        Exception: the first failure any thread hit.
    """
    errors: list = []
    start = threading.Barrier(threads + 1)

    def worker():
        try:
            start.wait()
            for _ in range(per_thread):
                launch()
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join(timeout=600)
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in pool):
        raise TimeoutError("throughput workers still running after 600 s")
    return threads * per_thread / elapsed


def pool_idle(pool) -> bool:
    """``pool`` (a pysandbox.Pool) has every sandbox ready and none left to close: its
    threads are idle. A build whose ``stats()`` has no ``closing`` (before issue 27 item 3's
    hpool change) is read by its used queue, so an A/B run measures both builds alike."""
    stats = pool.stats()
    closing = stats["closing"] if "closing" in stats else len(pool._used)
    return stats["ready"] >= pool.size and closing == 0


def rss_kib(pid: int | str = "self") -> int:
    """VmRSS of a process, in KiB (0 if the field is missing)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown cpu"


def machine() -> str:
    u = os.uname()
    return f"{u.sysname} {u.release} {u.machine}, {os.cpu_count()} cpus, {cpu_model()}"
