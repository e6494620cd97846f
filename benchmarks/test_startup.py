"""Start-up: whole-process time of the command lines next to bwrap, and import time."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import contenders as C

BINDIR = os.path.dirname(sys.executable)
POLICY_FLAGS = ["--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                "--tmpfs", "/tmp", "--die-with-parent", "--new-session"]
COMMANDS = {
    "python-pass": [sys.executable, "-c", "pass"],
    "python-isolated-pass": [sys.executable, "-I", "-c", "pass"],   # issue 15's reference
    "python-import-pysandbox": [sys.executable, "-c", "import pysandbox"],
    "pysandbox-run": [os.path.join(BINDIR, "pysandbox"), "run", "--backend", "native", "--no-workdir",
                      "--", C.TRUE],
    "pybwrap": [os.path.join(BINDIR, "pybwrap"), *POLICY_FLAGS, C.TRUE],
    "bwrap": [shutil.which("bwrap") or "bwrap", *POLICY_FLAGS, C.TRUE],
    "pybwrap-ro-bind": [os.path.join(BINDIR, "pybwrap"), "--ro-bind", "/", "/", C.TRUE],
    "bwrap-ro-bind": [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", C.TRUE],
    "pybwrap-help": [os.path.join(BINDIR, "pybwrap"), "--help"],
    "bwrap-help": [shutil.which("bwrap") or "bwrap", "--help"],
}


@pytest.mark.parametrize("label", COMMANDS)
def test_whole_process(benchmark, label):
    argv = COMMANDS[label]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        from conftest import unavailable
        unavailable(f"{label}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    benchmark.group = "startup"
    benchmark.pedantic(subprocess.run, args=(argv,), kwargs={"check": True, "stdout": subprocess.DEVNULL},
                       rounds=20, warmup_rounds=1)


def test_importtime(benchmark):
    """Cumulative ``import pysandbox`` time reported by ``python -X importtime`` (extra_info)."""
    found = []

    def measure():
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pysandbox"],
                              capture_output=True, text=True, check=True)
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|\s?pysandbox$", line)
            if m:
                found.append(int(m.group(1)))
    benchmark.group = "importtime"
    benchmark.pedantic(measure, rounds=10, warmup_rounds=1)
    assert found, "python -X importtime printed no line for pysandbox"
    benchmark.extra_info["import_pysandbox_us_median"] = sorted(found)[len(found) // 2]
