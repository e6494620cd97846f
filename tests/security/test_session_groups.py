"""A session's command takes a process group of its own, not a session (native/psb_session.c
own_session), where the sandbox made its own session: it still has no controlling
terminal to inject into, and another command's group signal (kill(0), ``kill -TERM 0``)
never reaches it. Where the sandbox shares the caller's session (new_session=False) each
command still gets a new session of its own, and so it does with report_denials (its
records are keyed by the command's session).

Live controls: unsandboxed, the same script injects into the terminal it was given
(the host allows TIOCSTI); the command that signals its own group is itself ended by it.
"""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest

import pysandbox
from tests.security.test_tiocsti import STI_SCRIPT, raw_pty, unsandboxed_injection

pytestmark = pytest.mark.requires("userns")

IDS = "import os, json; print(json.dumps([os.getpid(), os.getpgrp(), os.getsid(0)]))"


def test_a_session_command_has_no_terminal_to_inject_into(backend, tmp_path):
    master, slave = raw_pty()
    try:
        unsandboxed_injection(slave)
    finally:
        os.close(master)
        os.close(slave)
    master, slave = raw_pty()
    try:
        with pysandbox.Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend=backend) as sb:
            ids = json.loads(sb.run([sys.executable, "-I", "-c", IDS], capture_output=True, check=True).stdout)
            assert ids[1] == ids[0] and ids[2] == 1, ids   # its own group, in the server's session
            done = sb.run([sys.executable, "-I", "-c", STI_SCRIPT, "keep"], stdin=slave, capture_output=True)
            res = json.loads(done.stdout)
            assert res["ctty_is_stdin"][0] == errno.ENOTTY, res   # no controlling terminal at all
            assert res["sti"] == [errno.EPERM, None], res
            assert res["read"][1] in (None, ""), res
        os.set_blocking(slave, False)
        with pytest.raises(BlockingIOError):   # nothing was injected
            os.read(slave, 16)
    finally:
        os.close(master)
        os.close(slave)


def test_a_commands_group_signal_reaches_only_its_own_group(backend, tmp_path):
    with pysandbox.Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend=backend) as sb:
        other = sb.Popen(["sleep", "60"])
        try:
            # control: the signal is delivered, to the sender's own group (it dies of it)
            done = sb.run(["sh", "-c", "kill -TERM 0; sleep 5; echo survived"], capture_output=True, timeout=30)
            assert done.returncode == -15 and b"survived" not in done.stdout, done
            assert other.poll() is None   # the other command's group was not signalled
            assert sb.run(["true"]).returncode == 0   # nor the server or a keeper
        finally:
            other.kill()
            other.wait()


@pytest.mark.parametrize("option", [{"new_session": False}, {"report_denials": True}])
def test_a_shared_session_or_denials_still_give_each_command_its_own_session(backend, tmp_path, option):
    """new_session=False: the caller's terminal may be the session's; report_denials:
    records are keyed by a command's session (pysandbox/denials.py), which no process of
    another command can join (a process group it could)."""
    policy = pysandbox.Policy.default(workdir=tmp_path, **option)
    with pysandbox.Sandbox(policy, backend=backend) as sb:
        ids = json.loads(sb.run([sys.executable, "-I", "-c", IDS], capture_output=True, check=True).stdout)
    assert ids[0] == ids[1] == ids[2], ids   # a session leader: the caller's terminal is not its
