"""Section ``bwrap_lines``: bwrap command lines with many binds (srt emits one
``--ro-bind`` per denied path; one of its real lines has 2,518), pybwrap against
bwrap, on the run path (every source present, the command is ``true``) and on the
refusal path (the same line with one missing source last: both refuse it before
any mount). Wall and CPU time of the whole process (children included), medians.

    python benchmarks/run.py --sections bwrap_lines
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from measure import ms, ratio

PYBWRAP = [sys.executable, "-m", "bwrap_compat"]
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C", "PYTHONDONTWRITEBYTECODE": "1"}


def _argv(paths, missing: bool) -> list[str]:
    argv = ["--ro-bind", "/", "/", "--tmpfs", "/tmp"]
    for p in paths:
        argv += ["--ro-bind", p, p]
    if missing:
        argv += ["--ro-bind", "/nonexistent-pysandbox-bench/x", "/y"]
    return argv + ["true"]


def _once(cmd: list[str], want: int) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=ENV, cwd="/", timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != want:
        raise RuntimeError(f"{cmd[0]} exited {done.returncode} (wanted {want}): {done.stderr[-300:]!r}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def section_bwrap_lines(report, cfg: dict, deadline: float) -> None:
    counts = cfg["line_binds"]
    report.out(f"## bwrap command lines with many binds: {', '.join(map(str, counts))} --ro-binds, "
               "pybwrap (native) vs bwrap")
    report.out()
    bwrap = shutil.which("bwrap")
    tools = {"pybwrap": PYBWRAP}
    if bwrap:
        tools["bwrap"] = [bwrap]
    else:
        report.missing.append("bwrap not found on PATH")
    base = tempfile.mkdtemp(prefix="psb-bench-binds-", dir="/var/tmp")
    rows, results = [], {}
    try:
        paths = []
        for i in range(max(counts)):
            d = os.path.join(base, f"d{i % 50}")
            os.makedirs(d, exist_ok=True)
            p = os.path.join(d, f"f{i}")
            open(p, "w").close()
            paths.append(p)
        share = max(1.0, deadline - time.monotonic()) / len(counts)
        for count in counts:
            stop = time.monotonic() + share
            for path_kind, missing, want in (("run", False, 0), ("refusal", True, 1)):
                argv = _argv(paths[:count], missing)
                med = {}
                for name, tool in tools.items():
                    samples = []
                    while len(samples) < 5 and (not samples or time.monotonic() < stop):
                        samples.append(_once(tool + argv, want))
                    med[name] = (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples),
                                 len(samples))
                    results[f"{name}/{path_kind}/{count}"] = med[name][:2]
                py, bw = med["pybwrap"], med.get("bwrap")
                rows.append([count, path_kind, f"{ms(py[0])} ({ms(py[1])} CPU, n={py[2]})",
                             f"{ms(bw[0])} ({ms(bw[1])} CPU, n={bw[2]})" if bw else "-",
                             ratio(py[0], bw[0]) if bw else "n/a"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report.results["bwrap_lines"] = results
    report.table(["binds", "path", "pybwrap ms (CPU ms)", "bwrap ms (CPU ms)", "pybwrap/bwrap wall"], rows)
    report.out("Run path: every source present, `true` runs. Refusal path: one missing source last "
               "(`Can't find source path`), refused by both before any mount. CPU includes children.")
    report.out()
