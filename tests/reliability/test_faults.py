"""Faults: the launcher killed mid-setup, signals to ``pysandbox run``, timeouts.

- SIGKILL of a launching Python process at random points (20 rounds per backend;
  200 with ``PYSANDBOX_SOAK=1``): no process of the launch survives (found by a
  unique marker in every command line of the launch: the launcher's own, hence any
  of its forks before exec, the bind paths bwrap gets, the sandboxed command's), and
  the host mount table and temporary directory are unchanged.
- SIGTERM, SIGINT (and SIGHUP) sent to ``pysandbox run`` reach the command; the exit status
  is the command's (its handler's code, or 128+N when the signal killed it).
- A command that ignores SIGTERM is still killed on timeout (API and CLI).
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

import pysandbox
from tests.support import constrained
from tests.reliability import leaks

LONG = os.environ.get("PYSANDBOX_SOAK") == "1"
KILL_ROUNDS = 200 if LONG else 20
pytestmark = [pytest.mark.requires("userns")]

LAUNCHER = r"""
import sys
marker, backend, workdir = sys.argv[1:4]
import pysandbox
policy = pysandbox.Policy.default(workdir=workdir)
print("ready", flush=True)
proc = pysandbox.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker],
                       policy=policy, backend=backend)
print("launched", flush=True)
proc.wait()
"""
# In the sandbox: say ready, then on SIGTERM/SIGINT print which and exit 7.
HANDLER = r"""
import signal, sys, time
def on(n, f):
    print("got", n, flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, on)
signal.signal(signal.SIGINT, on)
signal.signal(signal.SIGHUP, on)
print("ready", flush=True)
for _ in range(6000):
    time.sleep(0.1)
"""
# In the sandbox: ignore SIGTERM (say so when it comes), never exit on its own.
STUBBORN = r"""
import os, signal, sys, time
# os.write, not print: a print() in a handler re-enters a print() it interrupted.
signal.signal(signal.SIGTERM, lambda n, f: os.write(1, b"ignored %d\n" % n))
print("ready", flush=True)
for _ in range(6000):
    time.sleep(0.1)
"""


def _readline(stream, limit: float = 60.0) -> str:
    ready, _, _ = select.select([stream], [], [], limit)
    if not ready:
        return ""
    return stream.readline()


def _kill_survivors(found):
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _launcher(marker, backend, workdir, env):
    return subprocess.Popen([sys.executable, "-c", LAUNCHER, marker, backend, workdir],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_sigkill_launcher_during_setup(backend, tmp_path, private_tmp):
    seed = int(os.environ.get("PYSANDBOX_FAULT_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=constrained.ROOT)
    before = leaks.snapshot()

    # Calibrate: how long does a launch take here, from "ready" to "launched"?
    marker = f"psb-fault-{uuid.uuid4().hex}"
    work = tmp_path / marker
    work.mkdir()
    proc = _launcher(marker, backend, str(work), env)
    assert _readline(proc.stdout) == "ready\n", proc.stderr.read() if proc.poll() is not None else ""
    t0 = time.monotonic()
    line = _readline(proc.stdout)
    setup = time.monotonic() - t0
    proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    assert line == "launched\n", "calibration launch failed"
    survived, kill_points = [], []
    found = leaks.wait_no_survivors(marker)   # killed right after the launch returned
    if found:
        survived.append(("after launch", found))
        _kill_survivors(found)
    # bwrap: the backend's own init (native/psb_bwrap_init.c) re-binds itself to bwrap's
    # life and checks its lifeline (the launcher still holds the status pipe) before
    # anything else, so a launcher killed during bwrap's setup no longer leaves a running
    # sandbox or command. What remains (documented gap, README "Reliability"): bubblewrap
    # 0.8's child waits for its parent to release it (an eventfd) and binds itself to
    # that parent only at the end of its setup; a launcher killed (so bwrap killed) in
    # that window leaves bwrap's child blocked in bwrap's own code forever: a process,
    # never the init or the command. Asserted as such.
    for _ in range(KILL_ROUNDS):
        marker = f"psb-fault-{uuid.uuid4().hex}"
        work = tmp_path / marker
        work.mkdir()
        proc = _launcher(marker, backend, str(work), env)
        try:
            line = _readline(proc.stdout)
            assert line == "ready\n", (line, proc.stderr.read() if proc.poll() is not None else "")
            delay = rng.uniform(0, setup * 1.3)
            kill_points.append(delay)
            time.sleep(delay)
            proc.kill()
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        found = leaks.wait_no_survivors(marker)
        if found:
            survived.append((round(delay * 1000, 1), found))
            _kill_survivors(found)
    problems = leaks.settle(before)
    print(f"\n{backend}: {KILL_ROUNDS} SIGKILL rounds (seed {seed}), setup {setup * 1000:.1f} ms, "
          f"{len(survived)} with survivors")
    if backend == "bwrap":
        ran = [(ms, found) for ms, found in survived
               if not all(os.path.basename(cmd.split(" ", 1)[0]) == "bwrap" for _pid, cmd in found)]
        assert not ran, f"seed {seed}: more than bwrap's own child survived: {ran[:3]}"
        survived = []
    assert not survived, f"seed {seed}: survivors after SIGKILL of the launcher at ms: {survived[:3]}"
    assert not problems, "left behind: " + "; ".join(problems)


def _cli(args, **kwargs):
    return subprocess.Popen(constrained.command("plain", ["cli", *args]),
                            env=constrained.environment(("plain",), None), **kwargs)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"])
def test_cli_signal_reaches_command(backend, sig, tmp_path):
    proc = _cli(["run", "--backend", backend, "--workdir", str(tmp_path), "--",
                 sys.executable, "-c", HANDLER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
    try:
        assert _readline(proc.stdout) == "ready\n", proc.stderr.read() if proc.poll() is not None else ""
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert out == f"got {int(sig)}\n", (out, err)
    assert proc.returncode == 7, (proc.returncode, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_cli_signal_kills_command(backend, sig, tmp_path):
    marker = f"600.{random.randrange(10**11, 10**12)}"   # a unique sleep interval: 600 s and a bit
    proc = _cli(["run", "--backend", backend, "--workdir", str(tmp_path), "--",
                 "/bin/sh", "-c", 'echo ready; exec sleep "$0"', marker],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _readline(proc.stdout) == "ready\n", proc.stderr.read() if proc.poll() is not None else ""
        # sleep 600 marker: wait until the exec happened, so the signal meets sleep
        deadline = time.monotonic() + 30
        while not any(cmd.startswith("sleep ") for _, cmd in leaks.survivors(marker)) and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + int(sig), (proc.returncode, err)
    assert not leaks.wait_no_survivors(marker)


def _api_timeout(backend, tmp_path):
    marker = f"psb-timeout-{uuid.uuid4().hex}"
    policy = pysandbox.Policy.default(workdir=str(tmp_path))
    with leaks.unchanged():
        with pytest.raises(pysandbox.TimeoutExpired) as info:
            pysandbox.run([sys.executable, "-c", STUBBORN, marker], policy=policy, backend=backend,
                          capture_output=True, text=True, timeout=3)
        found = leaks.wait_no_survivors(marker)
        _kill_survivors(found)
        assert not found, f"the timed-out sandbox survived: {found}"
    return info.value.stdout or ""


def _cli_timeout(backend, tmp_path):
    marker = f"psb-timeout-{uuid.uuid4().hex}"
    proc = _cli(["run", "--backend", backend, "--workdir", str(tmp_path), "--timeout", "3", "--",
                 sys.executable, "-c", STUBBORN, marker],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
        proc.wait()
    found = leaks.wait_no_survivors(marker)
    _kill_survivors(found)
    assert not found, f"the timed-out sandbox survived: {found}"
    assert proc.returncode not in (0, 125), (proc.returncode, err)
    assert "Traceback" not in err, err
    return out


def test_api_timeout_kills_stubborn_command(backend, tmp_path):
    assert "ready" in _api_timeout(backend, tmp_path)


def test_cli_timeout_kills_stubborn_command(backend, tmp_path):
    assert "ready" in _cli_timeout(backend, tmp_path)


# The grace period (pysandbox/lifecycle.py): on timeout the command gets SIGTERM first (this one
# ignores it and says so), then SIGKILL after the grace period.
def test_api_timeout_sends_sigterm_before_kill(backend, tmp_path):
    assert "ignored 15" in _api_timeout(backend, tmp_path)


def test_cli_timeout_sends_sigterm_before_kill(backend, tmp_path):
    assert "ignored 15" in _cli_timeout(backend, tmp_path)
