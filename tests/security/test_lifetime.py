"""Lifetime and exit status against a hostile command (THREAT: signals and ptrace,
lifetime). Both backends: the sandbox's pid 1 cannot be ptraced or read by the command
(live control: the command ptraces its own child), a --timeout, kill() and a SIGKILLed
launcher end every process of the sandbox even when the command ignores SIGTERM, clears
its PR_SET_PDEATHSIG and forks setsid'd descendants, and the reported exit status is
the command's own whatever it writes to its descriptors. ``as_pid_1`` (the command is
pid 1 and clears its own PR_SET_PDEATHSIG): kill() ends everything, and so does a
SIGKILLed launcher, through the lifetime monitor (live control: the same sandbox with the
monitor switched off outlives its launcher); tests/security/test_lifetime_monitor.py
attacks the monitor itself.

Processes are found by a unique marker in their command line; whatever a test made
and left is killed by pid in ``finally``."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

import pysandbox
from tests.security import oracles
from tests.security.conftest import VIA_SESSION
from tests.support import processes_with, wait_until

pytestmark = pytest.mark.requires("userns")

PTRACE = oracles.PRELUDE + r'''
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
def ptrace(req, pid):
    def go():
        step("ptrace")
        if libc.ptrace(ctypes.c_long(req), ctypes.c_long(pid), None, None) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    return go
def read(path):
    def go():
        step("open")
        with open(path, "rb") as f:
            return len(f.read(16))
    return go
RESULTS["ppid"] = os.getppid()
for pid in sorted({1, os.getppid()}):
    attempt(f"seize_{pid}", ptrace(PTRACE_SEIZE, pid))
    attempt(f"attach_{pid}", ptrace(PTRACE_ATTACH, pid))
    attempt(f"mem_{pid}", read(f"/proc/{pid}/mem"))
    attempt(f"environ_{pid}", read(f"/proc/{pid}/environ"))
# live control: our own child (same uid, dumpable) can be ptraced
kid = os.fork()
if kid == 0:
    time.sleep(30)
    os._exit(0)
attempt("seize_child", ptrace(PTRACE_SEIZE, kid))
os.kill(kid, 9)
os.waitpid(kid, 0)
done()
'''


def test_pid1_cannot_be_ptraced_or_read(backend, tmp_path):
    res = oracles.run_probe(PTRACE, pysandbox.Policy.default(workdir=tmp_path), backend)
    assert res["seize_child"]["ok"], res["seize_child"]   # ptrace itself works in the sandbox
    if VIA_SESSION:   # the parent is the command's keeper, which must hold the same line
        assert res["ppid"] != 1, res["ppid"]
    else:
        assert res["ppid"] == 1, res["ppid"]
    for pid in sorted({1, res["ppid"]}):
        for key in (f"seize_{pid}", f"attach_{pid}", f"mem_{pid}", f"environ_{pid}"):
            got = res[key]
            assert got["ok"] is False and got["errname"] in ("EPERM", "EACCES"), (key, got)


# A hostile command: ignores SIGTERM, clears its own PR_SET_PDEATHSIG, forks two
# setsid'd, double-forked descendants that do the same, says "ready", then sleeps.
HOSTILE = r'''
import ctypes, os, signal, sys, time
marker = sys.argv[1]
libc = ctypes.CDLL(None)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
libc.prctl(1, 0, 0, 0, 0)
CHILD = "import ctypes, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
        "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0); time.sleep(1000)"
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", CHILD, marker])
        os._exit(0)
    os.waitpid(pid, 0)
print("ready", flush=True)
while True:
    time.sleep(1000)
'''


def _hostile(marker):
    return [sys.executable, "-I", "-c", HOSTILE, marker]


def _kill_leftovers(marker):
    for pid, _ in processes_with(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _all_up(marker, n=3):
    # the command and its two descendants, each exec'd with the marker in argv
    return wait_until(lambda: len(processes_with(marker)) >= n)


@pytest.mark.parametrize("as_pid_1", [False, True])
def test_kill_ends_a_hostile_sandbox(backend, tmp_path, as_pid_1):
    marker = f"psb-life-{uuid.uuid4().hex}"
    policy = pysandbox.Policy.default(workdir=tmp_path, as_pid_1=as_pid_1)
    try:
        with pysandbox.Popen(_hostile(marker), policy=policy, backend=backend, stdout=subprocess.PIPE) as proc:
            assert proc.stdout.readline() == b"ready\n"
            assert _all_up(marker)
            proc.kill()
            proc.wait()
        assert wait_until(lambda: not processes_with(marker)), processes_with(marker)
    finally:
        _kill_leftovers(marker)


def test_timeout_ends_a_hostile_sandbox(backend, tmp_path):
    marker = f"psb-life-{uuid.uuid4().hex}"
    try:
        with pytest.raises(pysandbox.TimeoutExpired):
            pysandbox.run(_hostile(marker), policy=pysandbox.Policy.default(workdir=tmp_path), backend=backend,
                          capture_output=True, timeout=3, kill_grace=0.5)
        assert wait_until(lambda: not processes_with(marker)), processes_with(marker)
    finally:
        _kill_leftovers(marker)


LAUNCHER = r"""
import os, sys, time
import pysandbox
from pysandbox.backends import monitor
mode = sys.argv[4]
if mode == "nomonitor":   # the live control: the internal test switch, in this launcher only
    monitor._test_disabled = True
policy = pysandbox.Policy.default(workdir=sys.argv[3], as_pid_1=mode != "0")
proc = pysandbox.Popen(sys.argv[5:], policy=policy, backend=sys.argv[1], stdout=pysandbox.PIPE)
watcher = proc._child.monitor if mode != "0" else None
sys.stdout.write(proc.stdout.readline().decode().strip() + " %d\n" % (watcher.pid if watcher else -1))
sys.stdout.flush()
time.sleep(600)
"""


def _sigkill_launcher(backend, tmp_path, marker, mode, command, n=3, alive=None):
    """Start LAUNCHER (``mode``: "0", "1" as_pid_1, "nomonitor" as_pid_1 without the
    monitor) running ``command``, wait for its "ready" line and ``n`` processes with the
    marker (the launcher's own included) and for ``alive()``, then SIGKILL the launcher by
    its pid. Returns (the rest of the command's first line, the monitor's pidfd or -1:
    opened while the launcher, its parent, was alive)."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, backend, marker, str(tmp_path), mode, *command],
                                stdout=subprocess.PIPE, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                    os.path.abspath(__file__)))))
    watcher = -1
    try:
        line = launcher.stdout.readline().split()
        assert line[:1] == [b"ready"], line
        if int(line[-1]) > 0:
            watcher = os.pidfd_open(int(line[-1]))   # the launcher has not reaped it: still it
        assert _all_up(marker, n)
        assert alive is None or alive(), "the sandbox is not running as it should before the kill"
        os.kill(launcher.pid, signal.SIGKILL)
        return line[1:-1], watcher
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()


def test_sigkilled_launcher_leaves_nothing(backend, tmp_path):
    marker = f"psb-life-{uuid.uuid4().hex}"
    try:
        _sigkill_launcher(backend, tmp_path, marker, "0", _hostile(marker))
        assert wait_until(lambda: not processes_with(marker)), processes_with(marker)
    finally:
        _kill_leftovers(marker)


# as_pid_1's hostile command: pid 1 itself clears its PR_SET_PDEATHSIG (and checks it is
# cleared), SIGKILLs everything it can see (kill(-1): its pid namespace, not the host's
# monitor), forks a setsid'd descendant that clears its own too and beats a heartbeat
# file in the workdir every 20 ms, says "ready <pid> <pdeathsig>", then sleeps.
PID1 = r"""
import ctypes, os, signal, sys, time
marker, beat = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
libc.prctl(1, 0, 0, 0, 0)                          # PR_SET_PDEATHSIG 0
now = ctypes.c_int(-1)
libc.prctl(2, ctypes.byref(now), 0, 0, 0)          # PR_GET_PDEATHSIG
try:
    os.kill(-1, signal.SIGKILL)
except ProcessLookupError:                         # nothing else it can see
    pass
BEAT = "import ctypes, os, sys, time; ctypes.CDLL(None).prctl(1, 0, 0, 0, 0); n = 0\n" \
       "while True:\n n += 1; open(sys.argv[2] + '.new', 'w').write(str(n)); " \
       "os.replace(sys.argv[2] + '.new', sys.argv[2]); time.sleep(0.02)"
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", BEAT, marker, beat])
print("ready", os.getpid(), now.value, flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(1000)
"""


def _beat(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _beating(path, seconds=5.0):
    """Whether the heartbeat file changes within ``seconds``."""
    first = _beat(path)
    return wait_until(lambda: _beat(path) not in (None, first), seconds)


@pytest.mark.parametrize("mode", ["1", "nomonitor"])
def test_as_pid_1_dies_with_a_sigkilled_launcher(backend, tmp_path, mode):
    """as_pid_1: the command is pid 1 and clears its own PR_SET_PDEATHSIG, its setsid'd
    descendant too; the launcher is SIGKILLed by its pid. The lifetime monitor
    (pysandbox/backends/monitor.py) SIGKILLs pid 1 through its pidfd: pid 1, the
    descendant and the monitor itself are gone within a bound, and the heartbeat stops.
    Controls: before the kill both were alive and the heartbeat beat; with the monitor
    off (the internal test switch, in that launcher only: ``nomonitor``) the same
    sandbox outlives its launcher, so the leak the monitor closes is real."""
    marker = f"psb-life-{uuid.uuid4().hex}"
    beat = str(tmp_path / "heartbeat")
    watcher = -1
    try:
        first, watcher = _sigkill_launcher(backend, tmp_path, marker, mode,
                                           [sys.executable, "-I", "-c", PID1, marker, beat], n=3,
                                           alive=lambda: _beating(beat))
        assert first == [b"1", b"0"], first   # pid 1, its PR_SET_PDEATHSIG cleared
        assert (watcher >= 0) == (mode == "1")
        if mode == "nomonitor":
            time.sleep(1.0)
            assert len(processes_with(marker)) >= 2, "without the monitor the sandbox should outlive its launcher"
            assert _beating(beat)
            return
        assert wait_until(lambda: not processes_with(marker), 10.0), processes_with(marker)
        assert select.select([watcher], [], [], 10.0)[0], "the monitor outlived its work"
        last = _beat(beat)
        time.sleep(0.3)
        assert _beat(beat) == last, "the heartbeat goes on"
    finally:
        if watcher >= 0:
            os.close(watcher)
        _kill_leftovers(marker)


def test_as_pid_1_status_says_monitor(backend):
    """``as_pid_1_lifetime`` is said of an as_pid_1 policy; the default policy's pid 1 is
    our init, where it means nothing (issue 31 item 5), so status does not print it."""
    as_pid_1 = pysandbox.Policy.default(as_pid_1=True)
    info = pysandbox.status(as_pid_1, backend=backend).backends[backend].info
    assert info.get("as_pid_1_lifetime") == "monitor", info
    assert "as_pid_1_lifetime" not in pysandbox.status(backend=backend).backends[backend].info


FORGER = r'''
import os, struct, sys
# Try to write a forged "exit 0" wait status everywhere the command can: every
# descriptor it holds and the init's descriptors through /proc/1/fd.
fake = struct.pack("<i", 0)
hit = []
for fd in range(3, 1024):
    try:
        os.write(fd, fake * 4)
        hit.append(fd)
    except OSError:
        pass
try:
    names = os.listdir("/proc/1/fd")
except OSError:
    names = []
for name in names:
    try:
        fd = os.open("/proc/1/fd/" + name, os.O_WRONLY)
        os.write(fd, fake * 4)
        hit.append("1:" + name)
    except OSError:
        pass
print(hit)
sys.exit(int(sys.argv[1]))
'''


@pytest.mark.parametrize("code", [3, 0])
def test_exit_status_cannot_be_forged(backend, tmp_path, code):
    done = pysandbox.run([sys.executable, "-I", "-c", FORGER, str(code)],
                         policy=pysandbox.Policy.default(workdir=tmp_path), backend=backend, capture_output=True,
                         timeout=60)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout.strip() == b"[]", done.stdout   # nothing of the launcher's or init's reached


def test_signal_death_is_minus_n_on_both_backends(backend, tmp_path):
    done = pysandbox.run(["sh", "-c", "kill -USR1 $$"], policy=pysandbox.Policy.default(workdir=tmp_path),
                         backend=backend, timeout=60)
    assert done.returncode == -signal.SIGUSR1
