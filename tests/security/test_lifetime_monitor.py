"""The lifetime monitor of an as_pid_1 sandbox, attacked (THREAT: lifetime;
pysandbox/backends/monitor.py, native/psb_monitor.h). Both backends.

- the monitor holds exactly its three descriptors, every signal blocked, a session of
  its own, outside the sandbox's pid namespace, and is reaped when the sandbox ends;
- the command (pid 1) stops and kills everything it can see (live control: its own
  child is stopped), and the monitor is untouched;
- a fork of the launcher that keeps a copy of the lifeline's write end does not keep
  the sandbox alive once the launcher is SIGKILLed (the monitor's pidfd of the
  launcher; control: the fork does hold the lifeline);
- a launcher SIGKILLed before its monitor exists never lets the command run (the gate;
  control: the same launcher not killed runs it), and the bwrap init's gate alone holds
  the command without its byte (control: with it, the command runs);
- without pidfds as_pid_1 fails closed with ``lifetime_monitor_unavailable``, and
  ``status`` says so (control: the same host state runs a launch with our init).

The whole-sandbox test (pid 1 clears its PR_SET_PDEATHSIG, a heartbeat descendant, the
launcher SIGKILLed, the monitor switched off as the live control) is
tests/security/test_lifetime.py::test_as_pid_1_dies_with_a_sigkilled_launcher."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import uuid

import pytest

import pysandbox
from pysandbox.backends import monitor
from pysandbox.errors import Reason
from tests.reliability import leaks
from tests.support import processes_with, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _policy(tmp_path, **kw):
    return pysandbox.Policy.default(workdir=tmp_path, as_pid_1=True, **kw)


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _blocked(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("SigBlk:")[1].split()[0], 16)


@pytest.mark.parametrize("form", ["exec", "fork"])
def test_monitor_holds_three_descriptors_and_nothing_else(backend, tmp_path, monkeypatch, form):
    """Both forms: the init's memfd exec'd in monitor mode, and the fork of the launcher
    where that memfd cannot be exec'd (forced: PYSANDBOX_NATIVE_NO_EXEC_INIT=1)."""
    if form == "fork":
        monkeypatch.setenv("PYSANDBOX_NATIVE_NO_EXEC_INIT", "1")
    with leaks.unchanged():
        with pysandbox.Popen(["sleep", "30"], policy=_policy(tmp_path), backend=backend) as proc:
            watcher = proc._child.monitor
            assert watcher is not None and watcher.pid > 0
            with open(f"/proc/{watcher.pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open("/proc/self/cmdline", "rb") as f:
                assert cmdline == (b"psb-monitor\0monitor\0" if form == "exec" else f.read())
            if form == "exec" and os.geteuid() != 0:
                # exec'd from an execute-only memfd: undumpable, so not even its own uid
                # reads its descriptors (root's run and the fork form check them)
                with pytest.raises(PermissionError):
                    os.listdir(f"/proc/{watcher.pid}/fd")
            else:
                fds = {int(n): os.readlink(f"/proc/{watcher.pid}/fd/{n}")
                       for n in os.listdir(f"/proc/{watcher.pid}/fd")}
                assert sorted(fds) == [3, 4, 5], fds
                assert fds[3] == fds[5] == "anon_inode:[pidfd]" and fds[4].startswith("pipe:"), fds
                # the lifeline: the write end is the launcher's (this process), the read end the monitor's
                assert os.readlink(f"/proc/self/fd/{watcher.fd}") == fds[4]
                # on the host, outside the sandbox's pid namespace
                assert os.readlink(f"/proc/{watcher.pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
            # every signal blocked (the kernel never shows SIGKILL and SIGSTOP as blocked); the
            # fork form sets its mask right after the fork, which may not have run yet
            assert wait_until(lambda: _blocked(watcher.pid) | (1 << 8) | (1 << 18) == (1 << 64) - 1, 5.0), \
                hex(_blocked(watcher.pid))
            assert os.getsid(watcher.pid) == watcher.pid != os.getsid(0)
            with open(f"/proc/{watcher.pid}/status") as f:   # a pid of our namespace: the host's
                assert f.read().split("NSpid:")[1].split("\n")[0].split() == [str(watcher.pid)]
            pid1 = getattr(proc._child, "sandbox_pid", None) or proc.pid   # bwrap: proc.pid is bwrap
            assert os.readlink(f"/proc/{pid1}/ns/pid") != os.readlink("/proc/self/ns/pid")
            proc.kill()
            proc.wait()
        # reaped by the launcher when the sandbox ended (leaks.unchanged: no child left)
        with pytest.raises(ChildProcessError):
            os.waitpid(watcher.pid, os.WNOHANG)


STOPPER = r"""
import os, signal, sys, time
kid = os.fork()
if kid == 0:
    time.sleep(1000)
    os._exit(0)
time.sleep(0.1)
os.kill(-1, signal.SIGSTOP)                   # everything pid 1 can see
time.sleep(0.2)
with open("/proc/%d/stat" % kid) as f:
    state = f.read().rsplit(")", 1)[1].split()[0]
os.kill(-1, signal.SIGKILL)
print(os.getpid(), state, flush=True)
time.sleep(1000)
"""


def test_pid1_cannot_stop_or_kill_the_monitor(backend, tmp_path):
    """pid 1 sends SIGSTOP then SIGKILL to every process it can see (kill(-1)); its own
    child is stopped (the live control: the attack works on what it can see), the
    monitor is not touched, and kill() still ends the sandbox and the monitor."""
    with pysandbox.Popen([sys.executable, "-I", "-c", STOPPER], policy=_policy(tmp_path), backend=backend,
                         stdout=subprocess.PIPE) as proc:
        watcher = proc._child.monitor
        assert proc.stdout.readline().split() == [b"1", b"T"]
        assert _state(watcher.pid) == "S"
        proc.kill()
        proc.wait()


FORKER = r"""
import os, sys, time
import pysandbox
policy = pysandbox.Policy.default(workdir=sys.argv[2], as_pid_1=True)
proc = pysandbox.Popen([sys.executable, "-I", "-c", "import sys, time; print('ready', flush=True); time.sleep(1000)",
                        sys.argv[3]], policy=policy, backend=sys.argv[1], stdout=pysandbox.PIPE)
line = proc.stdout.readline()
kid = os.fork()                                # holds every descriptor of ours, the lifeline too
if kid == 0:
    time.sleep(600)
    os._exit(0)
print(line.decode().strip(), proc._child.monitor.pid, proc._child.monitor.fd, kid, flush=True)
time.sleep(600)
"""


def test_a_fork_of_the_launcher_does_not_keep_the_sandbox(backend, tmp_path):
    """The launcher forks (its copy holds the lifeline's write end, so that pipe alone
    would not end) and is SIGKILLed: the monitor's pidfd of the launcher still ends the
    sandbox. Control: the fork does hold the lifeline."""
    marker = f"psb-mon-{uuid.uuid4().hex}"
    launcher = subprocess.Popen([sys.executable, "-c", FORKER, backend, str(tmp_path), marker],
                                stdout=subprocess.PIPE, cwd=ROOT)
    kid = -1
    try:
        ready, mpid, mfd, kid = launcher.stdout.readline().split()
        assert ready == b"ready"
        kid = int(kid)
        lifeline = os.readlink(f"/proc/{launcher.pid}/fd/{int(mfd)}")
        assert os.readlink(f"/proc/{kid}/fd/{int(mfd)}") == lifeline   # control: the fork holds it
        watcher = os.pidfd_open(int(mpid))
        try:
            os.kill(launcher.pid, signal.SIGKILL)
            assert wait_until(lambda: not [p for p, _ in processes_with(marker) if p not in (launcher.pid, kid)],
                              10.0), processes_with(marker)
            assert select.select([watcher], [], [], 10.0)[0], "the monitor outlived its launcher"
        finally:
            os.close(watcher)
        assert os.path.exists(f"/proc/{kid}")   # the fork lived on meanwhile
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()
        if kid > 0:
            _kill([kid])
        _kill(p for p, _ in processes_with(marker))


EARLY = r"""
import os, signal, sys
import pysandbox
policy = pysandbox.Policy.default(workdir=sys.argv[2], as_pid_1=True)
die = sys.argv[3] == "1"

def on_start(pid):
    if die:   # the launcher dies before its monitor exists (native: the child waits at its gate)
        os.kill(os.getpid(), signal.SIGKILL)

proc = pysandbox.Popen(["sh", "-c", "echo ran > " + sys.argv[4]], policy=policy, backend=sys.argv[1],
                       on_start=on_start)
proc.wait()
"""


@pytest.mark.parametrize("die", [True, False])
def test_launcher_dead_before_its_monitor_never_runs_the_command(backend, tmp_path, die):
    """The launcher is SIGKILLed after the sandbox's first process exists and before the
    monitor does (bwrap; native: before or while the monitor starts, the C thread runs
    beside on_start): the command never runs (native: the setup's lifeline check or EOF at
    the child's gate; bwrap: EOF on our init's ``-w``, which
    test_bwrap_init_gate_holds_the_command isolates). Control (``die=False``): the same
    launch runs it."""
    out = tmp_path / "ran"
    launcher = subprocess.run([sys.executable, "-c", EARLY, backend, str(tmp_path), "1" if die else "0", str(out)],
                              cwd=ROOT, timeout=60)
    try:
        assert launcher.returncode == (-signal.SIGKILL if die else 0)
        if die:
            # give a command that would have been let through the time to run
            assert not wait_until(out.exists, 2.0)
        else:
            assert out.read_text() == "ran\n"
    finally:
        # bwrap 0.8's documented gap (README, "Reliability"; tests/reliability/test_faults.py):
        # a launcher killed this early can leave bwrap's own child blocked in bwrap's code
        # for good (its command line names tmp_path). Never anything else; ended here.
        found = leaks.wait_no_survivors(str(tmp_path), 3.0)
        for pid, _ in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    assert all(os.path.basename(cmd.split(" ", 1)[0]) == "bwrap" for _pid, cmd in found), found


@pytest.mark.one_shot_only("a one-shot as_pid_1 launch and its monitor; a session is as_pid_1 itself, so its "
                            "control would fail closed the same way")
def test_without_pidfds_as_pid_1_fails_closed(backend, tmp_path, monkeypatch):
    """No pidfd_open (Linux < 5.3, simulated): an as_pid_1 launch raises
    lifetime_monitor_unavailable and the command never ran; ``status`` names it.
    Control: the same state runs a launch with our init as pid 1."""
    monkeypatch.setattr(monitor, "_pidfd_error", "pidfd_open: simulated (Linux < 5.3)")
    out = tmp_path / "ran"
    with pytest.raises(pysandbox.CapabilityUnavailable) as caught:
        pysandbox.run(["sh", "-c", f"echo ran > {out}"], policy=_policy(tmp_path), backend=backend)
    assert caught.value.reason == Reason.LIFETIME_MONITOR_UNAVAILABLE
    assert not out.exists()
    info = pysandbox.status(_policy(tmp_path, hostname="psb-no-pidfd"), backend=backend).backends[backend]
    assert info.info["as_pid_1_lifetime"].startswith("unavailable: pidfd_open: simulated"), info.info
    if backend == "native":
        assert not info.available and info.reason == Reason.LIFETIME_MONITOR_UNAVAILABLE.value, info
    done = pysandbox.run(["sh", "-c", f"echo ran > {out}"], policy=pysandbox.Policy.default(workdir=tmp_path),
                         backend=backend)
    assert done.returncode == 0 and out.read_text() == "ran\n"


@pytest.mark.requires("userns")
@pytest.mark.parametrize("go", [False, True])
def test_bwrap_init_gate_holds_the_command(go, tmp_path):
    """The bwrap backend's init (native/psb_bwrap_init.c) in exec mode with a gate (what an as_pid_1
    launch runs): without a byte on the gate (the launcher died, or its monitor did not
    start) it exits 125 and the command never runs; with the byte (the control) the
    command runs. The init runs as pid 1 under ``unshare``, which stays alive."""
    from tests.security.test_init_lifeline import _init_head
    out = tmp_path / "ran"
    r, w = os.pipe()
    gate_r, gate_w = os.pipe()
    head, passed = _init_head(w, exec_mode=True, gate=gate_r)
    proc = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--", *head,
                             "--", "/bin/sh", "sh", "-c", f"echo ran > {out}"],
                            pass_fds=(*passed, gate_r), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(w)
    os.close(gate_r)
    try:
        if go:
            os.write(gate_w, b"\1")
        os.close(gate_w)
        code = proc.wait(timeout=60)
        words = os.read(r, 64)
        if go:
            assert code == 0 and out.read_text() == "ran\n", (code, words, proc.stderr.read())
        else:
            assert code == 125 and words == b"" and not out.exists(), (code, words, proc.stderr.read())
    finally:
        os.close(r)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()


def test_as_pid_1_without_a_procfs_is_watched_too(backend, tmp_path):
    """No procfs in the sandbox: on native the command is pid 1 and has its monitor; on
    bwrap, whose init (the only thing that holds the command until the monitor exists)
    is exec'd through the sandbox's procfs, the launch fails closed and the command never
    runs (control: the same launch with the procfs runs, test_as_pid_1 ... above)."""
    from pysandbox.policy import Proc, Tmpfs
    policy = _policy(tmp_path)
    policy = policy.replace(fs=tuple(Tmpfs("/proc") if isinstance(op, Proc) else op for op in policy.fs))
    if backend == "bwrap":
        out = tmp_path / "ran"
        with pytest.raises(pysandbox.BackendUnavailable) as info:
            pysandbox.run(["sh", "-c", f"echo ran > {out}"], policy=policy, backend=backend)
        assert info.value.reason is Reason.BWRAP_INIT_UNAVAILABLE and not out.exists()
        with_proc = _policy(tmp_path)   # the live control: a procfs, the init, the command runs
        assert pysandbox.run(["sh", "-c", f"echo ran > {out}"], policy=with_proc, backend=backend).returncode == 0
        assert out.read_text() == "ran\n"
        return
    with pysandbox.Popen([sys.executable, "-I", "-c", "import os; print(os.getpid(), os.path.exists('/proc/self'))"],
                         policy=policy, backend=backend, stdout=subprocess.PIPE) as proc:
        watcher = proc._child.monitor
        assert watcher is not None and os.path.exists(f"/proc/{watcher.pid}")
        assert proc.stdout.read().split() == [b"1", b"False"]
