"""DirectProcess (pysandbox/direct.py: the command lines' launch without subprocess)
against SandboxProcess, side by side on every backend: each case runs on both, and
SandboxProcess's outcome is the live control of DirectProcess's (exit codes, a signal's
death, SIGTERM forwarded to the command, wait's timeout and lifecycle.stop, /dev/null
stdio, the wall-time limit's kill, close_in_setup with pass_fds refused)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from pysandbox import Limits, Policy, PolicyError, Reason
from pysandbox.direct import DEVNULL, DirectProcess
from pysandbox.lifecycle import stop
from pysandbox.process import SandboxProcess
from tests.support import wait_until

KINDS = {"direct": DirectProcess, "popen": SandboxProcess}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return KINDS[request.param]


def _policy(tmp_path, **kw):
    return Policy.default(workdir=str(tmp_path), **kw)


@pytest.mark.parametrize("script,code", [("exit 7", 7), ("true", 0), ("kill -TERM $$", -15), ("kill -KILL $$", -9)])
def test_returncode(backend, kind, tmp_path, script, code):
    proc = kind(["sh", "-c", script], policy=_policy(tmp_path), backend=backend)
    assert proc.wait() == code and proc.returncode == code and proc.poll() == code


def test_sigterm_reaches_the_command(backend, kind, tmp_path):
    proc = kind(["sh", "-c", "trap 'exit 42' TERM; touch ready; while :; do sleep 0.05; done"],
                policy=_policy(tmp_path), backend=backend)
    assert wait_until(lambda: (tmp_path / "ready").exists())
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait() == 42


def test_wait_timeout_then_stop(backend, kind, tmp_path):
    proc = kind(["sh", "-c", "touch ready; exec sleep 60"], policy=_policy(tmp_path), backend=backend)
    assert wait_until(lambda: (tmp_path / "ready").exists())
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.05)
    assert proc.returncode is None
    assert stop(proc, 30) == -15   # SIGTERM to the command ended it before the grace


def test_kill_ends_the_sandbox(backend, kind, tmp_path):
    proc = kind(["sh", "-c", "trap '' TERM; touch ready; sleep 60 & wait"], policy=_policy(tmp_path), backend=backend)
    assert wait_until(lambda: (tmp_path / "ready").exists())
    proc.kill()
    assert proc.wait() == -9


def test_wait_for_none_means_the_timeout_passed(backend, tmp_path):
    proc = DirectProcess(["sh", "-c", "touch ready; exec sleep 60"], policy=_policy(tmp_path), backend=backend)
    assert wait_until(lambda: (tmp_path / "ready").exists())
    assert proc.wait_for(0.05) is None and proc.poll() is None
    proc.kill()
    assert proc.wait_for(None) == -9


def test_devnull_stdio(backend, kind, tmp_path):
    proc = kind(["sh", "-c", "cat > in; for n in 1 2; do [ /proc/self/fd/$n -ef /dev/null ] && echo $n >> null; done"],
                policy=_policy(tmp_path), backend=backend, stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL)
    assert proc.wait() == 0
    assert (tmp_path / "in").read_text() == ""
    assert (tmp_path / "null").read_text() == "1\n2\n"


def test_caller_stdio_is_inherited(backend, kind, tmp_path):
    """No stdio given: the command's 0, 1 and 2 are the caller's (here a file of the test's)."""
    with open(tmp_path / "caller-out", "wb") as f:
        saved = os.dup(1)
        os.dup2(f.fileno(), 1)
        try:
            proc = kind(["sh", "-c", "echo hello"], policy=_policy(tmp_path), backend=backend)
            code = proc.wait()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    assert code == 0 and (tmp_path / "caller-out").read_text() == "hello\n"


def test_wall_time_limit_kills(backend, kind, tmp_path):
    proc = kind(["sleep", "60"], policy=_policy(tmp_path, limits=Limits(wall_time=0.2)), backend=backend)
    assert proc.wait() == -9 and proc.limit == "wall_time"


@pytest.mark.parametrize("where", ["call", "policy"])
def test_close_in_setup_naming_a_passed_descriptor_is_refused_before_anything_starts(backend, kind, tmp_path, where):
    """A descriptor both closed by the setup and passed: the command used to get the
    caller's copy anyway (close_in_setup silently ineffective); now conflicting_options,
    naming it, before a process exists. Live controls: the same descriptor in pass_fds
    alone reaches the command; close_in_setup alone launches."""
    r, w = os.pipe()
    other_r, other_w = os.pipe()
    try:
        ran = tmp_path / "ran"
        cmd = ["/usr/bin/python3", "-c", f"import os; open({str(ran)!r}, 'w'); os.write({w}, b'passed\\n')"]
        passed = {"pass_fds": (w,)} if where == "call" else {}
        policy = _policy(tmp_path, pass_fds=(w,)) if where == "policy" else _policy(tmp_path)
        started = []
        with pytest.raises(PolicyError) as info:
            kind(cmd, policy=policy, backend=backend, close_in_setup=(other_w, w), on_start=started.append, **passed)
        assert info.value.reason is Reason.CONFLICTING_OPTIONS and info.value.value == w
        assert f"descriptor {w} " in str(info.value)
        assert started == [] and not ran.exists()
        proc = kind(cmd, policy=policy, backend=backend, **passed)   # control: passed, it reaches the command
        assert proc.wait() == 0 and ran.exists()
        os.close(w)
        w = -1
        assert os.read(r, 64) == b"passed\n"
        alone = kind(["true"], policy=_policy(tmp_path), backend=backend, close_in_setup=(other_w,))
        assert alone.wait() == 0   # control: close_in_setup alone is accepted
    finally:
        for fd in (r, w, other_r, other_w):
            if fd >= 0:
                os.close(fd)


def test_only_none_or_devnull_stdio():
    with pytest.raises(ValueError):
        DirectProcess(["true"], stdout=subprocess.PIPE)
    assert DEVNULL == subprocess.DEVNULL
