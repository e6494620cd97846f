"""Start-up of two trees side by side: each tree's console scripts (``pysandbox run -- true``,
``pybwrap --ro-bind / / true``, ``pysandbox run --backend bwrap -- true``) alternated round
by round with ``python -I -c pass`` and bwrap, as startup.py measures one tree. For a
before/after figure: build each tree's wheel and install it in a venv of its own (an
editable install's ``__editable__`` finder slows every import: issue 28), and give both
venvs' bin directories; run this with one of the two venvs' python (``python -I -c pass``
is that interpreter's). The install kind of each side is printed with the table.

    pip wheel --no-deps -w /var/tmp/old-dist /path/to/old/tree
    python3 -m venv /var/tmp/old-venv && /var/tmp/old-venv/bin/pip install /var/tmp/old-dist/*.whl
    (the same for the new tree into /var/tmp/new-venv)
    /var/tmp/new-venv/bin/python benchmarks/startup_ab.py --a /var/tmp/old-venv/bin --b /var/tmp/new-venv/bin
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
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
    for side, bindir in (("a", args.a), ("b", args.b)):
        print(f"{side}: {os.path.abspath(bindir)}: {install_kind(bindir)}")
    print(f"{args.rounds} rounds; load average {start_load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"| command | median ms | CPU ms (mean) | wall / {BASE} | CPU / {BASE} |")
    print("|---|---|---|---|---|")
    for label, got in samples.items():
        med, used = statistics.median(got), statistics.fmean(cpu[label])
        print(f"| {label} | {med * 1000:.1f} | {used * 1000:.1f} | {med / base:.2f} | {used / base_cpu:.2f} |")
    return 0


def install_kind(bindir: str) -> str:
    """startup.install_kind() as that venv's python answers it."""
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([os.path.join(bindir, "python"), "-c", f"import sys; sys.path.insert(0, {here!r}); "
                           "import startup; print(startup.install_kind())"], capture_output=True, text=True)
    return done.stdout.strip() or f"unknown ({done.stderr.strip()[-200:]})"


if __name__ == "__main__":
    sys.exit(main())
