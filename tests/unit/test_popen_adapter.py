"""The adapter to CPython's private Popen internals (pysandbox/_popen.py): fails loudly
when a CPython release changes what it relies on, and proves it drives a real child."""

import inspect
import os
import select
import subprocess
import sys

from pysandbox import _popen


def test_execute_child_signature_is_what_the_adapter_overrides():
    params = tuple(inspect.signature(subprocess.Popen._execute_child).parameters)
    assert params[:len(_popen.EXECUTE_CHILD_PARAMS)] == _popen.EXECUTE_CHILD_PARAMS, params


def test_close_pipe_fds_and_handle_exitstatus_exist():
    params = tuple(inspect.signature(subprocess.Popen._close_pipe_fds).parameters)
    assert params == _popen.CLOSE_PIPE_FDS_PARAMS, params
    assert callable(getattr(subprocess.Popen, "_handle_exitstatus", None))


class _Child:
    """A plain posix_spawn child standing in for a backend's sandbox."""

    def __init__(self, argv, stdin, stdout, stderr):
        actions = [(os.POSIX_SPAWN_DUP2, stdin, 0), (os.POSIX_SPAWN_DUP2, stdout, 1),
                   (os.POSIX_SPAWN_DUP2, stderr, 2)]
        self.pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions)
        self.closed = 0

    def returncode(self, wait_status):
        return os.waitstatus_to_exitcode(wait_status) + 100   # proves the child decides

    def close(self):
        self.closed += 1


class _Adapted(_popen.BackendPopen):
    def _start_child(self, argv, stdin, stdout, stderr):
        return _Child(argv, stdin, stdout, stderr)


def test_the_adapter_runs_a_child_with_subprocess_pipes():
    code = "import sys; data = sys.stdin.read(); sys.stdout.write(data.upper()); sys.exit(3)"
    with _Adapted([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        out, _ = proc.communicate(b"hello", timeout=60)
    assert out == b"HELLO"
    assert proc.returncode == 103   # through the child's returncode(), not Popen's own
    assert proc._child.closed == 1
    assert proc._child_created is True
    assert hasattr(proc, "_waitpid_lock")   # reap_exited takes it, as wait/poll do


def test_reap_exited_reaps_once_through_the_child():
    with _Adapted([sys.executable, "-c", "import sys; sys.exit(4)"]) as proc:
        fd = os.pidfd_open(proc.pid)
        try:
            select.select([fd], [], [], 60)   # readable once the process has exited
        finally:
            os.close(fd)
        assert proc.reap_exited() == 104
        assert proc.reap_exited() == 104 and proc.wait() == 104
    assert proc._child.closed == 1


def test_the_adapter_closes_the_parent_copies_of_the_child_ends():
    before = set(os.listdir("/proc/self/fd"))
    with _Adapted([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE) as proc:
        proc.communicate(timeout=60)
    assert set(os.listdir("/proc/self/fd")) - before == set()
