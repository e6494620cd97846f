"""Start-up of two trees side by side: each tree's console scripts (``pysandbox run -- true``,
``pybwrap --ro-bind / / true``, ``pysandbox run --backend bwrap -- true``) alternated round
by round with ``python -I -c pass`` and bwrap, as startup.py measures one tree. For a
before/after figure: install the old commit in a venv of its own (``git worktree add``,
``pip install -e .``) and give both venvs' bin directories.

    python benchmarks/startup_ab.py --a /var/tmp/old/.venv/bin --b .venv/bin --rounds 40
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import measure as M
from startup import BASE, _env, runnable


def commands(label: str, bindir: str) -> dict[str, list[str]]:
    bindir = os.path.abspath(bindir)
    sandbox, pybwrap = os.path.join(bindir, "pysandbox"), os.path.join(bindir, "pybwrap")
    return {
        f"{label}: pysandbox run -- true": [sandbox, "run", "--", "/bin/true"],
        f"{label}: pybwrap --ro-bind / / true": [pybwrap, "--ro-bind", "/", "/", "/bin/true"],
        f"{label}: pysandbox run --backend bwrap -- true": [sandbox, "run", "--backend", "bwrap", "--",
                                                            "/bin/true"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, metavar="BIN", help="the first tree's venv bin directory")
    ap.add_argument("--b", required=True, metavar="BIN", help="the second tree's venv bin directory")
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args(argv)
    env = _env()
    wanted = {BASE: [sys.executable, "-I", "-c", "pass"]}
    wanted.update(commands("a", args.a))
    wanted.update(commands("b", args.b))
    wanted["bwrap --ro-bind / / true"] = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "/bin/true"]
    with tempfile.TemporaryDirectory(prefix="psb-bench-ab-", dir="/var/tmp") as workdir:
        pool = []
        for msg in runnable(wanted, workdir, env, pool):
            print(f"(left out: {msg})")
        start_load = os.getloadavg()[0]
        cpu: dict = {}
        samples = M.alternate(pool, args.rounds, warmup=3, cpu=cpu)
    if BASE not in samples:
        print("python -I -c pass did not run: no ratios")
        return 1
    base, base_cpu = statistics.median(samples[BASE]), statistics.fmean(cpu[BASE])
    print(f"{args.rounds} rounds; load average {start_load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"| command | median ms | CPU ms (mean) | wall / {BASE} | CPU / {BASE} |")
    print("|---|---|---|---|---|")
    for label, got in samples.items():
        med, used = statistics.median(got), statistics.fmean(cpu[label])
        print(f"| {label} | {med * 1000:.1f} | {used * 1000:.1f} | {med / base:.2f} | {used / base_cpu:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
