"""Sandbox.run's lean path (pysandbox/session_run.py) against its Popen path
(SessionProcess + run_process): the same results for each option, and a spy showing
which path each call took (the live control: an option outside session_run.OPTIONS
takes the Popen path)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

import pysandbox
from pysandbox import session_run
from pysandbox.session import SessionProcess
from tests.integration import test_session
from tests.support import wait_until

sb = test_session.sb   # the fixture: a session with its workdir


@pytest.fixture
def paths(monkeypatch):
    """Counts of the lean runs and of the SessionProcesses made."""
    seen = {"lean": 0, "popen": 0}
    lean, init = session_run.run, SessionProcess.__init__

    def counted_run(*a, **k):
        seen["lean"] += 1
        return lean(*a, **k)

    def counted_init(self, *a, **k):
        seen["popen"] += 1
        init(self, *a, **k)

    monkeypatch.setattr(session_run, "run", counted_run)
    monkeypatch.setattr(SessionProcess, "__init__", counted_init)
    return seen


def both(sb, paths, argv, **kw):
    """(lean outcome, Popen outcome): each a result's fields or the exception's."""
    def outcome(**extra):
        try:
            done = sb.run(argv, **kw, **extra)
        except (subprocess.SubprocessError, OSError) as exc:
            return (type(exc), getattr(exc, "returncode", None), getattr(exc, "cmd", None),
                    getattr(exc, "stdout", None), getattr(exc, "stderr", None), getattr(exc, "errno", None))
        return (done.args, done.returncode, done.stdout, done.stderr, done.limit, done.denials)
    before = dict(paths)
    lean = outcome()
    assert paths == {"lean": before["lean"] + 1, "popen": before["popen"]}
    popen = outcome(bufsize=-1)   # subprocess's default: an option only the Popen path takes
    assert paths == {"lean": before["lean"] + 1, "popen": before["popen"] + 1}   # the control
    return lean, popen


SCRIPT = "printf 'out\\r\\nline\\r'; echo err >&2; exit 3"
CASES = [
    ([], {}),
    (["sh", "-c", SCRIPT], {}),
    (["sh", "-c", SCRIPT], {"capture_output": True}),
    (["sh", "-c", SCRIPT], {"capture_output": True, "text": True}),
    (["sh", "-c", SCRIPT], {"capture_output": True, "encoding": "latin-1", "errors": "replace"}),
    (["sh", "-c", SCRIPT], {"capture_output": True, "universal_newlines": True, "check": True}),
    (["sh", "-c", SCRIPT], {"check": True, "timeout": 60}),
    (["sh", "-c", 'echo "$PWD $X"'], {"capture_output": True, "cwd": "/tmp", "env": {"X": "1"}}),
    (["sh", "-c", "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2"], {"capture_output": True}),
    ([b"/bin/echo", "x"], {"capture_output": True, "timeout": 60}),
    (["no-such-command-here"], {"capture_output": True}),
    (["true"], {"cwd": "/nonexistent"}),
]


@pytest.mark.parametrize("argv,kw", CASES)
def test_the_lean_path_gives_what_the_popen_path_gives(sb, paths, argv, kw):
    if not argv:
        argv = ["sh", "-c", "exit 0"]
    lean, popen = both(sb, paths, argv, **kw)
    assert lean == popen


def test_limits_and_pass_fds_take_the_lean_path(sb, paths):
    r, w = os.pipe()
    try:
        lean, popen = both(sb, paths, ["sh", "-c", f"echo via > /proc/self/fd/{w}; ulimit -t"], pass_fds=(w,), capture_output=True,
                           limits=pysandbox.Limits(cpu_time=7))
        os.close(w)
        w = -1
        with os.fdopen(os.dup(r), "rb") as got:
            assert got.read() == b"via\nvia\n"   # one from each path
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert lean == popen and lean[2] == b"7\n"


def test_a_timeout_then_the_grace_keeps_the_output_and_the_session(sb, paths):
    """SIGTERM at the timeout, SIGKILL kill_grace later (a command ignoring SIGTERM),
    the output read until then on the exception, on both paths; the command is gone."""
    argv = ["sh", "-c", "trap '' TERM; echo started; echo e >&2; while :; do sleep 1; done"]
    for extra in ({}, {"bufsize": -1}):
        with pytest.raises(subprocess.TimeoutExpired) as info:
            sb.run(argv, capture_output=True, timeout=0.5, kill_grace=0.2, **extra)
        assert (info.value.stdout, info.value.stderr, info.value.cmd) == (b"started\n", b"e\n", argv)
        assert sb.channel.commands == {}   # its end was read
    assert paths == {"lean": 1, "popen": 1}
    assert sb.run(["true"]).returncode == 0


def test_a_keyboard_interrupt_during_the_wait_ends_the_command(sb, paths):
    pidfile = sb.workdir / "pid"
    script = f"echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; exec sleep 600"
    alive = ["sh", "-c", f"test -e /proc/$(cat {pidfile})/status"]   # (signals: Landlock may scope them)
    other = sb.Popen(["sh", "-c", script])   # the control: while it runs, the check sees it
    assert wait_until(pidfile.exists)
    assert sb.run(alive).returncode == 0
    other.kill()
    other.wait()
    pidfile.unlink()

    def interrupt():
        if wait_until(pidfile.exists):
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sender = threading.Thread(target=interrupt)
    try:
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            sb.run(["sh", "-c", script], capture_output=True)
    finally:
        sender.join()
        signal.signal(signal.SIGINT, previous)
    assert paths["lean"] >= 2
    assert sb.run(alive).returncode != 0   # the interrupted command is gone
    assert sb.channel.commands == {}


def test_a_lost_session_ends_a_lean_run(backend, tmp_path, paths):
    box = pysandbox.Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend=backend)
    try:
        server = box._server.pid
        killer = threading.Thread(target=lambda: wait_until(lambda: box.channel.commands) and os.kill(server,
                                                                                                       signal.SIGKILL))
        killer.start()
        done = box.run(["sleep", "600"], capture_output=True)
        killer.join()
        assert done.returncode == -signal.SIGKILL and paths["lean"] == 1
        with pytest.raises(pysandbox.SessionError) as info:
            box.run(["true"])
        assert info.value.reason == pysandbox.Reason.SESSION_LOST
    finally:
        box.close()


def test_a_left_behind_process_holding_the_output_pipes_does_not_hang_the_run(sb, paths):
    """Hostile: a setsid'd daemon keeps the command's stdout and stderr open so reading them
    to EOF would never end. The session kills it at the command's end, so the lean run
    returns with what the command wrote. Control: the daemon did start (its pid file), and
    it is gone once the run returned."""
    pidfile = sb.workdir / "daemon"
    script = f"setsid sh -c 'echo $$ > {pidfile}; sleep 600; echo late' & " \
             f"while [ ! -s {pidfile} ]; do sleep 0.01; done; echo hi"
    done = sb.run(["sh", "-c", script], capture_output=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"hi\n", b"") and paths["lean"] == 1
    daemon = pidfile.read_text().strip()
    assert daemon.isdigit()   # the control: it ran, holding both pipes
    assert sb.run(["test", "-e", f"/proc/{daemon}/status"]).returncode != 0
