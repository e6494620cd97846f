"""run.py's ``startup`` section (registered in run.py's SECTIONS): what a command line costs
as a whole process, next to bwrap and to the bare interpreter (issue 15).

Every command is one whole process, run alternated with the others round by round;
wall time (median) and CPU time (user + system of the reaped process, mean: much less
sensitive to a loaded machine) are reported, with ratios to ``python -I -c pass`` (the
interpreter the console scripts run on) and to bwrap. Then ``import pysandbox``'s
cumulative time by ``python -X importtime`` (the best of a few runs), and which
``--help``/``--version`` paths import a backend or a cffi module (none should).

The commands run without PYTHONDONTWRITEBYTECODE, so their bytecode caches are written
in the warm-up where the tree is writable; whether they exist is reported, since a tree
without them compiles every module on each start.

Targets (issue 15): ``import pysandbox`` <= 15 ms; ``pysandbox run -- true`` and
``pybwrap --ro-bind / / true`` <= 3x ``python -I -c pass``; no backend on the help paths.

Which install is measured (issue 28): the console scripts and ``python`` next to
``sys.executable``, i.e. the environment run.py runs in. The section names it (a wheel, or
an editable install, whose ``__editable__`` finder slows every import and the bare
interpreter too, so its ratios are not what a user installing the wheel gets); the
figure to quote is a wheel's: ``pip wheel --no-deps -w DIST .``, ``pip install
DIST/pysandbox-*.whl`` into a fresh venv, then ``VENV/bin/python benchmarks/run.py
--sections startup`` (benchmarks/README.md).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

import contenders as C
import measure as M
from measure import Summary, ms, ratio

POLICY_FLAGS = ["--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                "--tmpfs", "/tmp", "--die-with-parent", "--new-session"]
BASE = "python -I -c pass"
BACKEND_MODULE = re.compile(r"^(pysandbox\.backends(\..*)?|pysandbox\._native|_cffi_backend|cffi(\..*)?)$")


@dataclass
class Command:
    """A contender for measure.alternate: one whole process."""
    label: str
    argv: list
    launch: Callable[[], object]
    every: int = 1


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def commands(workdir: str) -> dict[str, list[str]]:
    py = sys.executable
    bindir = os.path.dirname(py)
    bw = shutil.which("bwrap") or "bwrap"
    pybwrap, pysandbox = os.path.join(bindir, "pybwrap"), os.path.join(bindir, "pysandbox")
    return {
        BASE: [py, "-I", "-c", "pass"],
        "python -c 'import pysandbox'": [py, "-c", "import pysandbox"],
        "pysandbox run -- true": [pysandbox, "run", "--", C.TRUE],
        "pybwrap --ro-bind / / true": [pybwrap, "--ro-bind", "/", "/", C.TRUE],
        "bwrap --ro-bind / / true": [bw, "--ro-bind", "/", "/", C.TRUE],
        "pybwrap <default policy> true": [pybwrap, *POLICY_FLAGS, C.TRUE],
        "bwrap <default policy> true": [bw, *POLICY_FLAGS, C.TRUE],
        "pybwrap --help": [pybwrap, "--help"],
        "bwrap --help": [bw, "--help"],
        "pybwrap --version": [pybwrap, "--version"],
        "pysandbox --help": [pysandbox, "--help"],
        "pysandbox --version": [pysandbox, "--version"],
    }


def install_kind() -> str:
    """How pysandbox is installed in this interpreter's environment: ``wheel`` (a regular
    install), ``editable`` (pip's ``direct_url.json`` says so, or an ``__editable__``
    finder is on ``sys.meta_path``) or ``source tree`` (imported from a checkout)."""
    import json
    from importlib import metadata
    try:
        dist = metadata.distribution("pysandbox")
    except metadata.PackageNotFoundError:
        return "source tree (not installed)"
    direct = dist.read_text("direct_url.json")
    editable = bool(direct and json.loads(direct).get("dir_info", {}).get("editable"))
    if editable or any("__editable__" in type(f).__module__ for f in sys.meta_path):
        return "editable"
    return "wheel"


def importtime_us(python: str, module: str = "pysandbox", runs: int = 5) -> int | None:
    """The smallest cumulative ``import MODULE`` time (us) over ``runs`` runs."""
    best = None
    for _ in range(runs):
        done = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"],
                              capture_output=True, text=True, env=_env())
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|\s?(\S.*)$", line)
            if m and m.group(3).strip() == module:
                value = int(m.group(2))
                best = value if best is None else min(best, value)
    return best


def backends_imported(argv: list[str]) -> list[str]:
    """The backend and cffi modules a console-script command imports (``-X importtime``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          env=_env())
    names = [m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+\s+\|\s+\d+\s+\|\s?(\S.*)$",
                                                       done.stderr, re.M)]
    return [n for n in names if BACKEND_MODULE.match(n)]


def runnable(wanted: dict[str, list[str]], workdir: str, env: dict, pool: list) -> list[str]:
    """Run each command once in ``workdir`` (a warm-up that also writes .pyc files); append
    a :class:`Command` for each that exited 0 to ``pool`` and return why the others are left
    out (``label: exit N: stderr's tail``). startup_ab.py uses it too."""
    missing = []
    for label, argv in wanted.items():
        done = subprocess.run(argv, capture_output=True, text=True, cwd=workdir, env=env)
        if done.returncode != 0:
            missing.append(f"{label}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
            continue

        def launch(argv=argv):
            return subprocess.run(argv, check=True, cwd=workdir, env=env, stdout=subprocess.DEVNULL)
        pool.append(Command(label, argv, launch))
    return missing


def section_startup(report, cfg: dict, deadline: float) -> None:
    rounds = cfg["startup_rounds"]
    report.out(f"## Start-up: whole-process time ({rounds} rounds, alternated)")
    report.out()
    kind = install_kind()
    report.out(f"- install measured: {kind}, console scripts of {os.path.dirname(sys.executable)}"
               + ("" if kind == "wheel" else " (NOT a wheel: an editable install's finder slows every import; "
                  "the ratios a user gets are a wheel's, benchmarks/README.md)"))
    report.results["startup_install"] = kind
    report.out()
    env = _env()
    with tempfile.TemporaryDirectory(prefix="psb-bench-startup-", dir="/var/tmp") as workdir:
        pool = []
        for msg in runnable(commands(workdir), workdir, env, pool):
            report.missing.append(msg)
            report.out(f"  (missing: {msg})")
        cpu: dict = {}
        samples = M.alternate(pool, rounds, warmup=2, deadline=deadline, cpu=cpu)
    stats = {label: Summary.of(s) for label, s in samples.items()}
    cpu_mean = {label: statistics.fmean(v) for label, v in cpu.items()}
    base, base_cpu = stats.get(BASE), cpu_mean.get(BASE)
    rows = []
    for label, s in stats.items():
        rows.append([label, ms(s.median), ms(s.p90), ms(cpu_mean[label]),
                     ratio(s.median, base.median) if base else "n/a",
                     ratio(cpu_mean[label], base_cpu) if base_cpu else "n/a"])
    report.table(["command", "median ms", "p90 ms", "CPU ms (mean)", f"wall / {BASE}", f"CPU / {BASE}"], rows)
    for ours, theirs in (("pybwrap --ro-bind / / true", "bwrap --ro-bind / / true"),
                         ("pybwrap <default policy> true", "bwrap <default policy> true"),
                         ("pybwrap --help", "bwrap --help")):
        if ours in stats and theirs in stats:
            report.out(f"- {ours} / {theirs}: wall {ratio(stats[ours].median, stats[theirs].median)}, "
                       f"CPU {ratio(cpu_mean[ours], cpu_mean[theirs])}")
    imp = importtime_us(sys.executable)
    report.out(f"- python -X importtime: import pysandbox cumulative {imp} us (best of 5)" if imp is not None
               else "- python -X importtime: pysandbox line not found")
    # what the first use of the API costs on top: Policy, plan and the process layer
    whole = importtime_us(sys.executable, "pysandbox.process")
    report.out(f"- python -X importtime: import pysandbox.process (Policy, plan, run, Popen; no backend module "
               f"but the registry) cumulative {whole} us (best of 5)")
    import pysandbox
    cached = os.path.exists(importlib.util.cache_from_source(pysandbox.__file__))
    report.out(f"- bytecode caches of the tree: {'present' if cached else 'ABSENT (every start compiles)'}")
    leaks = {}
    for label in ("pysandbox --help", "pysandbox --version", "pybwrap --help", "pybwrap --version"):
        argv = commands("")[label]
        leaks[label] = backends_imported([argv[0], *argv[1:]])
        report.out(f"- {label} imports: {', '.join(leaks[label]) or 'no backend, no cffi module'}")
    report.out()
    report.results["startup"] = {k: dict(median=v.median, cpu_mean=cpu_mean[k]) for k, v in stats.items()}
    report.results["importtime_us"] = imp
    report.results["importtime_process_us"] = whole
    report.target("import pysandbox (-X importtime, ms) <= 15", imp / 1000 if imp is not None else None, 15)
    for label in ("pysandbox run -- true", "pybwrap --ro-bind / / true"):
        s = stats.get(label)
        report.target(f"{label} ({kind}): wall / {BASE} <= 3", s.median / base.median if s and base else None, 3)
        report.target(f"{label} ({kind}): CPU / {BASE} <= 3",
                      cpu_mean[label] / base_cpu if label in cpu_mean and base_cpu else None, 3)
    report.target("backend or cffi modules imported by --help/--version of both command lines",
                  float(sum(len(v) for v in leaks.values())), 0)
