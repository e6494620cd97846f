#!/usr/bin/env python3
"""Print one table of launch-cost ratios, every figure measured side by side in one run.

    python benchmarks/run.py            # the full run (a few minutes)
    python benchmarks/run.py --quick    # CI: proves every contender and section works (<1 min)
    python benchmarks/run.py --sections launch,mounts,session,pool --plot launch.png   # the picture

Contenders (each launches /bin/true; see contenders.py): plain spawn, the floor
program, pysandbox native, pysandbox's bwrap backend, raw bwrap. Sections: launch
latency (network deny and allow), mount scaling, throughput (throughput.py: one-shot, session and
pool from the same threads), 5,000 back-to-back launches, start-up (startup.py: whole command lines next to bwrap and to `python -I -c pass`),
memory; and (sessions.py) commands in a live session, a warm pool, asyncio batches, a session soak;
and (proxy.py) the latency and throughput the egress proxy adds to a request, (proxy_launch.py) what
network proxy mode adds to a launch; (bwrap_lines.py) bwrap command lines with thousands of
binds, pybwrap against bwrap. Exit status 0 when every section ran; 1 when a
contender could not run (unless --allow-missing) or a launch failed; 2 usage.
Targets missed are reported, not failures: these are benchmarks, not tests.
"""

from __future__ import annotations

import argparse
import array
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders as C  # noqa: E402
import denials as D  # noqa: E402
import measure as M  # noqa: E402
import proxy as P  # noqa: E402
import proxy_launch as PL  # noqa: E402
import sessions as S  # noqa: E402
import startup as U  # noqa: E402
import throughput as T  # noqa: E402
from bwrap_lines import section_bwrap_lines  # noqa: E402
from measure import Summary, ms, ratio  # noqa: E402

FULL = dict(launch_rounds=400, ballast_mib=(0, 256, 1024), bind_counts=(0, 10, 100, 400, 1000),
            threads=(1, 2, 4), per_thread=150, soak=5000, soak_chunk=1000, startup_rounds=20,
            cow_objects=200_000, session_rounds=1000, pool_rounds=300, refill_n=50, aio_reps=7,
            session_soak=10_000, pool_soak=1000, back_to_back=500, proxy_rounds=400, proxy_big_mib=64, time_budget=900,
            line_binds=(100, 1000, 2500))
QUICK = dict(launch_rounds=8, ballast_mib=(0, 64), bind_counts=(0, 10, 100), threads=(1, 2),
             per_thread=4, soak=300, soak_chunk=60, startup_rounds=2, cow_objects=20_000, session_rounds=60,
             pool_rounds=20, refill_n=8, aio_reps=1, session_soak=500, pool_soak=100, back_to_back=20, proxy_rounds=20,
             proxy_big_mib=4, time_budget=50, line_binds=(10, 100))
LAUNCH_NAMES = ("plain", "floor", "native", "bwrap-backend", "bwrap")
MOUNT_NAMES = ("floor", "native", "bwrap-backend", "bwrap")


class Report:
    def __init__(self):
        self.missing: list[str] = []
        self.results: dict = {}
        self.samples: dict = {}   # section -> label -> seconds per launch (--plot's distributions)
        self.targets: list = []   # (description, value, limit, verdict)

    def out(self, line: str = "") -> None:
        print(line, flush=True)

    def table(self, header: list[str], rows: list[list]) -> None:
        self.out("| " + " | ".join(header) + " |")
        self.out("|" + "|".join("---" for _ in header) + "|")
        for row in rows:
            self.out("| " + " | ".join(str(x) for x in row) + " |")
        self.out()

    def target(self, what: str, value: float | None, limit: float, lower_is_better: bool = True) -> None:
        if value is None:
            self.targets.append((what, "n/a", limit, "not measured"))
            return
        met = value <= limit if lower_is_better else value >= limit
        self.targets.append((what, f"{value:.2f}", limit, "met" if met else "MISSED"))


def available(report: Report, name: str, network: str = "deny", binds=()):
    try:
        return C.make(name, network, list(binds))
    except C.Unavailable as exc:
        if str(exc) not in report.missing:
            report.missing.append(str(exc))
            report.out(f"  (missing: {exc})")
        return None


# ---------------------------------------------------------------- sections

def section_launch(report: Report, cfg: dict, deadline: float) -> None:
    report.out(f"## Launch latency: /bin/true, default policy ({cfg['launch_rounds']} rounds, alternated)")
    report.out()
    pool = []
    for network in C.NETWORKS:
        for name in LAUNCH_NAMES:
            if name == "plain" and network == "deny":
                continue   # plain has no network setting; measured once
            c = available(report, name, network)
            if c is not None:
                pool.append(c)
    cpu: dict = {}
    samples = M.alternate(pool, cfg["launch_rounds"], warmup=3, deadline=deadline, cpu=cpu)
    report.samples["launch"] = samples
    stats = {label: Summary.of(s) for label, s in samples.items()}
    cpu_mean = {label: statistics.fmean(v) for label, v in cpu.items()}
    report.results["launch"] = {k: dict(vars(v), cpu_mean=cpu_mean[k]) for k, v in stats.items()}
    rows = [[label, ms(s.median), ms(s.p90), ms(s.p99),
             ms(cpu_mean[label]) + (" (partial)" if label.startswith("bwrap") else ""), s.n]
            for label, s in stats.items()]
    report.table(["contender/network", "median ms", "p90 ms", "p99 ms", "CPU ms (mean)", "n"], rows)

    def med(label):
        s = stats.get(label)
        return s.median if s else None

    def r(a, b):
        return ratio(a, b) if a is not None and b is not None else "n/a"

    rows = []
    pairs = [("native", "bwrap"), ("native", "floor"), ("native", "bwrap-backend"), ("native", "plain"),
             ("bwrap-backend", "bwrap"), ("floor", "bwrap"), ("floor", "plain")]
    for a, b in pairs:
        row = [f"{a} / {b}"]
        for network in C.NETWORKS:
            la = f"{a}/{network}" if a != "plain" else "plain/allow"
            lb = f"{b}/{network}" if b != "plain" else "plain/allow"
            row.append(r(med(la), med(lb)))
        rows.append(row)
    for a, b in (("native", "floor"),):
        row = [f"CPU: {a} / {b}"]
        for network in C.NETWORKS:
            ca, cb = cpu_mean.get(f"{a}/{network}"), cpu_mean.get(f"{b}/{network}")
            row.append(r(ca, cb))
        rows.append(row)
    report.out("Ratios of medians of wall time, and of mean CPU time, same run. CPU time is user + "
               "system of this process and of the children it reaped (with theirs): it leaves out kernel "
               "work done asynchronously (network namespace teardown) and, for bwrap, the sandbox's own "
               "processes, which bwrap's monitor does not reap (hence 'partial'; `perf stat` counts "
               "them). It is much less sensitive to the machine's load than wall time.")
    report.out()
    report.table(["ratio", "network deny", "network allow"], rows)
    nb, nf, n = med("bwrap/deny"), med("floor/deny"), med("native/deny")
    report.target("default policy, network deny: native/bwrap <= 0.45",
                  n / nb if n and nb else None, 0.45)
    report.target("default policy, network deny: native/floor <= 1.3",
                  n / nf if n and nf else None, 1.3)


def section_mounts(report: Report, cfg: dict, deadline: float) -> None:
    counts = cfg["bind_counts"]
    report.out(f"## Mount scaling: extra read-only binds {', '.join(map(str, counts))} (network deny)")
    report.out()
    medians: dict = {}
    with C.BindDirs(max(counts)) as dirs:
        share = (deadline - time.monotonic()) / len(counts)
        for count in counts:
            binds = dirs.first(count)
            names = MOUNT_NAMES if count <= 100 else tuple(n for n in MOUNT_NAMES if n != "bwrap-backend")
            pool = [c for c in (available(report, name, "deny", binds) for name in names) if c]
            rounds = max(5, int(cfg["launch_rounds"] / 4 / (1 + count / 250)))
            for c in pool:
                if c.name.startswith("bwrap") and count > 100:
                    c.every = max(1, rounds // 4)   # bwrap takes seconds here: 4 samples are plenty
            samples = M.alternate(pool, rounds, warmup=1, deadline=time.monotonic() + share)
            for c in pool:
                medians[(c.name, count)] = Summary.of(samples[c.label]).median
    report.results["mounts"] = {f"{k[0]}/{k[1]}": v for k, v in medians.items()}
    header = ["binds"] + [f"{n} ms" for n in MOUNT_NAMES] + \
             [f"{n} us/bind" for n in MOUNT_NAMES] + ["native/bwrap"]
    rows = []
    for i, count in enumerate(counts):
        row = [count]
        row += [ms(medians[(n, count)]) if (n, count) in medians else "-" for n in MOUNT_NAMES]
        for n in MOUNT_NAMES:
            prev = counts[i - 1] if i else None
            a, b = medians.get((n, prev)), medians.get((n, count))
            row.append(f"{(b - a) / (count - prev) * 1e6:.1f}" if prev is not None and a and b else "-")
        nat, bw = medians.get(("native", count)), medians.get(("bwrap", count))
        row.append(ratio(nat, bw) if nat and bw else "n/a")
        rows.append(row)
    slopes = ["slope"] + ["-"] * len(MOUNT_NAMES)
    for n in MOUNT_NAMES:
        pts = [(c, medians[(n, c)]) for c in counts if (n, c) in medians]
        slopes.append(f"{M.slope(pts) * 1e6:.1f}" if len(pts) >= 2 else "-")
    rows.append(slopes + ["-"])
    report.table(header, rows)
    report.out("us/bind = marginal cost: (median at N - median at the previous N) / (N - previous N). "
               "Flat means the per-bind work does not grow with the number of mounts; 'slope' is the "
               "least-squares fit over all N. bwrap-backend is left out above 100 binds (it is raw bwrap "
               "plus a constant).")
    report.out()
    nat, bw = medians.get(("native", 400)), medians.get(("bwrap", 400))
    report.target("400 extra read-only binds: native/bwrap <= 0.10", nat / bw if nat and bw else None, 0.10)
    top = max(counts)
    mid = max([c for c in counts if 0 < c < top] or [0])
    for name in ("native", "bwrap", "floor"):
        if mid and all((name, c) in medians for c in (0, mid, top)):
            avg_mid = (medians[(name, mid)] - medians[(name, 0)]) / mid
            avg_top = (medians[(name, top)] - medians[(name, 0)]) / top
            flat = ratio(avg_top, avg_mid) if avg_mid > 0 and avg_top > 0 else "n/a (noise)"
            report.out(f"- {name}: average cost per bind {avg_mid * 1e6:.1f} us at {mid} binds, "
                       f"{avg_top * 1e6:.1f} us at {top}: ratio {flat} (flat: 1; a per-bind rescan "
                       f"of the mount table pushes it toward {top / mid:.1f})")
    report.out()
    if mid >= 100 and all(("native", c) in medians for c in (0, mid, top)):
        avg_mid = (medians[("native", mid)] - medians[("native", 0)]) / mid
        avg_top = (medians[("native", top)] - medians[("native", 0)]) / top
        report.target(f"native per-bind cost flat: average at {top} / average at {mid} binds <= 1.5",
                      avg_top / avg_mid if avg_mid > 0 else None, 1.5)


def section_throughput(report: Report, cfg: dict, deadline: float) -> None:
    T.section_throughput(report, cfg, deadline, available)


def section_soak(report: Report, cfg: dict, deadline: float) -> None:
    count, chunk = cfg["soak"], cfg["soak_chunk"]
    report.out(f"## {count:,} back-to-back native launches (network deny)")
    report.out()
    c = available(report, "native", "deny")
    control = available(report, "plain", "allow")
    if c is None or control is None:
        report.target(f"{count} launches: p99/p50 <= 3", None, 3)
        return
    for _ in range(50):
        c.launch()
    load0 = os.getloadavg()[0]
    # preallocated C arrays: recording a sample allocates nothing, so RSS growth is the launcher's
    samples, cpu, plain = (array.array("d", bytes(8 * n)) for n in (count, count, count // 10))
    rss0 = M.rss_kib()
    t0 = time.perf_counter()
    for i in range(count):
        c0 = M.cpu_seconds()
        t1 = time.perf_counter()
        c.launch()
        samples[i] = time.perf_counter() - t1
        cpu[i] = M.cpu_seconds() - c0
        if i % 10 == 9:   # a plain spawn now and then: the machine's own drift, for comparison
            t1 = time.perf_counter()
            control.launch()
            plain[i // 10] = time.perf_counter() - t1
    wall = time.perf_counter() - t0
    rss1 = M.rss_kib()
    samples, cpu, plain = list(samples), list(cpu), list(plain)
    whole = Summary.of(samples)
    first, last = Summary.of(samples[:chunk]), Summary.of(samples[-chunk:])
    pchunk = max(1, chunk // 10)
    pfirst, plast = Summary.of(plain[:pchunk]), Summary.of(plain[-pchunk:])
    cfirst, clast = statistics.fmean(cpu[:chunk]), statistics.fmean(cpu[-chunk:])
    growth = (rss1 - rss0) / (count / 1000)
    report.results["soak"] = dict(p50=whole.median, p99=whole.p99, first=first.median, last=last.median,
                                  cpu_first=cfirst, cpu_last=clast, plain_first=pfirst.median,
                                  plain_last=plast.median, rss_growth_kib_per_1000=growth, wall=wall)
    report.table(["p50 ms", "p90 ms", "p99 ms", "p99/p50", f"first {chunk} median", f"last {chunk} median",
                  "last/first", "CPU last/first", "plain spawn last/first", "launcher RSS growth / 1000"],
                 [[ms(whole.median), ms(whole.p90), ms(whole.p99), ratio(whole.p99, whole.median),
                   ms(first.median), ms(last.median), ratio(last.median, first.median), ratio(clast, cfirst),
                   ratio(plast.median, pfirst.median), f"{growth:.0f} KiB"]])
    report.out(f"Load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; a plain "
               f"spawn after every 10th launch (not in the figures above) shows the machine's own drift.")
    report.out()
    report.target(f"{count} launches: p99/p50 <= 3", whole.p99 / whole.median, 3.0)
    report.target(f"{count} launches: last {chunk} median within 20% of first",
                  abs(last.median / first.median - 1), 0.20)


def _init_status(argv_prefix, launch_capture) -> tuple[str, int, int]:
    text = launch_capture(["/bin/cat", "/proc/1/status"])
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    name = fields.get("Name", "?").strip()
    rss = int(fields.get("VmRSS", "0 kB").split()[0])
    anon = int(fields.get("RssAnon", "0 kB").split()[0])
    return name, rss, anon


def section_memory(report: Report, cfg: dict, deadline: float) -> None:
    report.out("## Memory: RSS of the in-sandbox init (pid 1 of the sandbox)")
    report.out()
    rows = []
    try:
        import pysandbox
    except ImportError as exc:
        report.missing.append(f"import pysandbox: {exc}")
        pysandbox = None
    for backend in ("native", "bwrap"):
        if pysandbox is None:
            break
        policy = pysandbox.Policy.default(network="deny")

        def capture(argv, backend=backend, policy=policy):
            return pysandbox.run(argv, policy=policy, backend=backend, capture_output=True,
                                 text=True, check=True, timeout=30).stdout
        try:
            rows.append([f"pysandbox {backend}", *_init_status(None, capture)])
        except Exception as exc:  # reported, the run goes on
            report.missing.append(f"init RSS via {backend}: {type(exc).__name__}: {exc}")
    try:
        argv = C.bwrap_argv("deny")[:-1]
        rows.append(["raw bwrap", *_init_status(None, lambda a: subprocess.run(
            argv + a, capture_output=True, text=True, check=True, timeout=30).stdout)])
    except Exception as exc:  # reported, the run goes on
        report.missing.append(f"init RSS via raw bwrap: {type(exc).__name__}: {exc}")
    report.results["init_rss"] = rows
    report.table(["launcher", "pid 1 name", "VmRSS KiB", "RssAnon KiB"], rows)
    if pysandbox is not None:
        _cow_table(report, pysandbox, cfg)
    report.out(f"Launcher (this Python process) RSS now: {M.rss_kib()} KiB; its growth per 1,000 "
               "launches is in the back-to-back section.")
    report.out()


def _rollup(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    out["Private"] = out.get("Private_Dirty", 0) + out.get("Private_Clean", 0)
    return out


def _cow_table(report: Report, pysandbox, cfg: dict) -> None:
    """The host process the launcher waits for (native: the init, a fork of the launcher;
    bwrap: bwrap's monitor), seen from the host: its private memory right after the start
    and after the launcher ran a full GC over a live heap (which writes to every page holding
    Python objects, so pages shared copy-on-write with a forked child become private)."""
    import gc
    heap = [dict(a=i, b=str(i)) for i in range(cfg["cow_objects"])]
    rows = []
    for backend in ("native", "bwrap"):
        policy = pysandbox.Policy.default(network="deny")
        try:
            proc = pysandbox.Popen(["/bin/sleep", "5"], policy=policy, backend=backend)
        except Exception as exc:  # reported, the run goes on
            report.missing.append(f"copy-on-write probe via {backend}: {type(exc).__name__}: {exc}")
            continue
        try:
            time.sleep(0.2)
            before = _rollup(proc.pid)
            gc.collect()
            for d in heap:
                d["a"] += 1
            after = _rollup(proc.pid)
            rows.append([f"pysandbox {backend}", M.rss_kib(), before["Rss"], before["Private"],
                         after["Pss"], after["Private"]])
        except PermissionError:
            rows.append([f"pysandbox {backend}", M.rss_kib(), "not readable as this user", "-", "-", "-"])
        finally:
            proc.kill()
            proc.wait()
    heap = None
    report.out(f"Host-side process of a running sandbox (native: its init; bwrap: the bwrap monitor), "
               f"launcher holding {cfg['cow_objects']:,} live dicts; KiB from /proc/PID/smaps_rollup:")
    report.out()
    report.table(["launcher", "launcher RSS", "Rss at start", "Private at start", "Pss after launcher GC",
                  "Private after launcher GC"], rows)


def section_ballast(report: Report, cfg: dict, deadline: float) -> None:
    sizes = cfg["ballast_mib"]
    report.out(f"## Launcher size: launch latency with {', '.join(map(str, sizes))} MiB of touched heap "
               "in the launching Python (network deny)")
    report.out()
    pool = [c for c in (available(report, name, "deny" if name != "plain" else "allow")
                        for name in ("plain", "floor", "native", "bwrap-backend")) if c]
    rows, ballast = [], None
    medians: dict = {}
    try:
        for size in sizes:
            ballast = None
            ballast = bytearray(size << 20)
            for i in range(0, len(ballast), 4096):
                ballast[i] = 1   # touch every page: a fork copies its page table
            rounds = max(3, cfg["launch_rounds"] // 8)
            cpu: dict = {}
            samples = M.alternate(pool, rounds, warmup=1, deadline=deadline, cpu=cpu)
            for c in pool:
                medians[(c.name, size)] = Summary.of(samples[c.label]).median
            rows.append([size, M.rss_kib() // 1024] + [ms(medians[(c.name, size)]) for c in pool] +
                        [ms(statistics.fmean(cpu[c.label])) for c in pool if c.name in ("floor", "native")])
    finally:
        ballast = None
    report.results["ballast"] = {f"{k[0]}/{k[1]}": v for k, v in medians.items()}
    report.table(["heap MiB", "launcher RSS MiB"] + [f"{c.name} ms" for c in pool] +
                 [f"{c.name} CPU ms" for c in pool if c.name in ("floor", "native")], rows)
    report.out("plain and floor go through subprocess (vfork: flat in the launcher's size); a launcher that "
               "fork()s the Python process pays for copying its page tables and for copy-on-write faults.")
    report.out()


SECTIONS = {"launch": section_launch, "ballast": section_ballast, "mounts": section_mounts,
            "throughput": section_throughput, "soak": section_soak, "startup": U.section_startup,
            "memory": section_memory, "session": S.section_session, "pool": S.section_pool,
            "aio": S.section_aio, "session_soak": S.section_session_soak, "proxy": P.section_proxy,
            "proxy_launch": PL.section_proxy_launch, "bwrap_lines": section_bwrap_lines,
            "denials": D.section_denials}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few rounds: prove everything works (CI)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--rounds", type=int, help="launch-latency rounds (default 400, quick 8)")
    ap.add_argument("--soak", type=int, help="back-to-back launches (default 5000, quick 300)")
    ap.add_argument("--allow-missing", action="store_true",
                    help="exit 0 even if a contender cannot run here (it is reported)")
    ap.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    ap.add_argument("--plot", metavar="FILE.png", help="also draw the launch latency distributions and the "
                    "mount scaling curves (benchmarks/plot.py; needs matplotlib: pysandbox[plot])")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.rounds:
        cfg["launch_rounds"] = args.rounds
    if args.soak:
        cfg["soak"] = args.soak
        cfg["soak_chunk"] = max(1, min(1000, args.soak // 5))
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (before the run, not after minutes of it)
        except ImportError:
            ap.error("--plot needs matplotlib: pip install 'pysandbox[plot]'")
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in names if s not in SECTIONS]
    if bad:
        ap.error(f"unknown sections: {bad}")
    report = Report()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report.out(f"# pysandbox benchmarks, {now}{' (quick)' if args.quick else ''}")
    report.out()
    report.out(f"machine: {M.machine()}; python {sys.version.split()[0]}; uid {os.geteuid()}; "
               f"load average at start {os.getloadavg()[0]:.2f}")
    report.out()
    start = time.monotonic()
    budget = cfg["time_budget"]
    failed = False
    for i, name in enumerate(names):
        # each section gets an equal share of what is left of the budget
        deadline = time.monotonic() + (budget - (time.monotonic() - start)) / (len(names) - i)
        try:
            SECTIONS[name](report, cfg, deadline)
        except Exception as exc:  # a launch failed mid-measurement: report, carry on, exit 1
            failed = True
            report.out(f"  SECTION {name} FAILED: {type(exc).__name__}: {exc}")
            report.out()
    report.out("## Targets (ratios from this run)")
    report.out()
    report.table(["target", "value", "limit", "verdict"], [list(t) for t in report.targets])
    report.out(f"total time {time.monotonic() - start:.1f} s; load average at end {os.getloadavg()[0]:.2f}")
    if report.missing:
        report.out("missing: " + "; ".join(report.missing))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(report.results, targets=report.targets, missing=report.missing, date=now,
                           machine=M.machine()), f, indent=2, default=str)
    if args.plot:
        import plot
        drawn = plot.draw(report.samples, report.results.get("mounts", {}), args.plot,
                          title=f"pysandbox {now}; {M.machine()}")
        report.out(f"plot: {args.plot} ({', '.join(drawn)})")
    if failed or (report.missing and not args.allow_missing):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
