"""The one wait for a child's exit (pysandbox/lifecycle.py ``reaped``, ``exited``), read
by DirectProcess, ``BackendPopen.reap_exited`` and ``Sandbox.close``: a child that cannot
end yet (it reads a pipe this test holds) is not reported, once the pipe is closed it is;
``reaped`` reaps (ECHILD afterwards reads as 0), ``exited`` leaves the zombie to its
owner's wait (the control: waitpid still finds its status). Each case also without a pidfd
(Popen's growing sleeps). No timing: the bounded waits are short, and what they report does
not depend on how long they took."""

from __future__ import annotations

import os

import pytest

from pysandbox import lifecycle


def spawn_reader(code: int):
    """A child that exits with ``code`` once the returned descriptor is closed."""
    r, w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_CLOSE, w)]
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"read x; exit {code}"], dict(os.environ), file_actions=actions)
    os.close(r)
    return pid, w


@pytest.fixture(params=["pidfd", "sleeps"])
def mode(request, monkeypatch):
    if request.param == "sleeps":
        def no_pidfd(pid):
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    return request.param


def test_reaped_reports_only_an_ended_child_and_reaps_it(mode):
    pid, w = spawn_reader(7)
    try:
        assert lifecycle.reaped(pid, 0) is None
        assert lifecycle.reaped(pid, 0.05) is None   # still reading: the bound passes first
    finally:
        os.close(w)
    status = lifecycle.reaped(pid, 60)
    assert os.waitstatus_to_exitcode(status) == 7
    with pytest.raises(ChildProcessError):   # reaped: no zombie left
        os.waitpid(pid, os.WNOHANG)
    assert lifecycle.reaped(pid, 0) == 0 and lifecycle.reaped(pid, None) == 0   # ECHILD reads as 0


def test_reaped_without_a_bound_waits_for_the_end(mode):
    pid, w = spawn_reader(3)
    os.close(w)
    assert os.waitstatus_to_exitcode(lifecycle.reaped(pid, None)) == 3


def test_exited_leaves_the_child_to_its_owner(mode):
    pid, w = spawn_reader(5)
    try:
        assert lifecycle.exited(pid, 0) is False
        assert lifecycle.exited(pid, 0.05) is False
    finally:
        os.close(w)
    assert lifecycle.exited(pid, 60) is True
    assert lifecycle.exited(pid, 0) is True   # still there, as a zombie
    got, status = os.waitpid(pid, 0)   # control: the owner's wait still finds its status
    assert got == pid and os.waitstatus_to_exitcode(status) == 5
    assert lifecycle.exited(pid, 0) is True   # ECHILD: gone


def test_control_a_reaping_look_takes_the_status_exited_leaves(mode):
    """The control of "not reaped": the same child after reaped(), not exited(), has no
    status left for its owner."""
    pid, w = spawn_reader(5)
    os.close(w)
    assert lifecycle.exited(pid, 60) is True
    assert os.waitstatus_to_exitcode(lifecycle.reaped(pid, 0)) == 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)
