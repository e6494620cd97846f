"""The one adapter to CPython's private ``subprocess.Popen`` internals.

:class:`BackendPopen` is a :class:`subprocess.Popen` whose child is started by a
callable instead of fork/exec, so pipes, ``communicate``, ``wait(timeout)`` and the
context manager are subprocess's own. Everything it relies on that is not public API
is here and nowhere else, and ``tests/unit/test_popen_adapter.py`` fails loudly when a
CPython release changes it:

- ``Popen._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
  startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread,
  errwrite, ...)``: its first 16 parameters (stable since Python 3.2);
- ``Popen._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)``;
- ``Popen._handle_exitstatus(sts)`` turning a wait status into ``returncode``;
- for :class:`RemotePopen` (a child that is not ours to ``waitpid``: a session's
  command): ``Popen._internal_poll(_deadstate=None, ...)`` and ``Popen._wait(timeout)``,
  which it replaces, as ``poll``/``wait``/``communicate``/``__del__`` call them.
- the attributes ``pid``, ``_child_created`` and ``_waitpid_lock`` (the lock Popen's
  ``wait``/``poll`` hold around ``waitpid``, so :meth:`BackendPopen.reap_exited` and
  they reap only once).
"""

from __future__ import annotations

import signal
import subprocess

from .lifecycle import reaped

# The leading parameters of Popen._execute_child this adapter is written against.
EXECUTE_CHILD_PARAMS = ("self", "args", "executable", "preexec_fn", "close_fds", "pass_fds", "cwd",
                        "env", "startupinfo", "creationflags", "shell", "p2cread", "p2cwrite",
                        "c2pread", "c2pwrite", "errread", "errwrite")
CLOSE_PIPE_FDS_PARAMS = ("self", "p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite")
WAIT_PARAMS = ("self", "timeout")
INTERNAL_POLL_FIRST = ("self", "_deadstate")


class BackendPopen(subprocess.Popen):
    """A Popen whose child comes from :meth:`_start_child`.

    Subclasses implement ``_start_child(argv, stdin, stdout, stderr) -> child``, where
    the descriptors are the child's ends of Popen's pipes (0, 1, 2 when not
    redirected) and ``child`` has ``pid``, ``returncode(wait_status)`` and ``close()``.
    """

    _child = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, *_ignored):
        try:
            self._child = self._start_child(list(args), p2cread if p2cread != -1 else 0,
                                            c2pwrite if c2pwrite != -1 else 1,
                                            errwrite if errwrite != -1 else 2)
            self.pid = self._child.pid
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    @property
    def child(self):
        """The backend's handle of the started command (None before it started)."""
        return self._child

    def _start_child(self, argv, stdin, stdout, stderr):  # pragma: no cover - abstract
        raise NotImplementedError

    def _handle_exitstatus(self, sts, *_a, **_k):
        child = self._child
        if child is None:
            return super()._handle_exitstatus(sts)
        self.returncode = child.returncode(sts)
        child.close()


    def reap_exited(self):
        """Reap ``pid`` without blocking and set ``returncode`` (through the child's
        mapping), for a caller told by an event loop (a pidfd became readable) that it
        exited. Returns ``returncode``, or None while the process runs.

        Safe beside a thread in ``wait``/``poll``: both hold ``_waitpid_lock``, and once
        the process has exited a ``wait`` holding it returns at once. When something else
        reaped the pid (ECHILD), the child's report decides, as Popen's own ``poll``
        falls back to 0.

        Raises:
            Nothing of its own.
        """
        if self.returncode is not None:
            return self.returncode
        with self._waitpid_lock:
            if self.returncode is None:
                sts = reaped(self.pid, 0)   # ECHILD: 0
                if sts is not None:
                    self._handle_exitstatus(sts)
        return self.returncode


class RemotePopen(BackendPopen):
    """A BackendPopen whose child is not a process of ours: its exit is learnt from the
    child object, not ``waitpid``. The child (from ``_start_child``) also has
    ``wait_status(timeout) -> raw wait status or None`` (None: not yet; timeout 0 polls,
    None blocks) and ``signal(sig)``; ``pid`` is whatever it names the command by."""

    def _internal_poll(self, _deadstate=None, *_a, **_k):
        if self.returncode is None and self._child is not None:
            status = self._child.wait_status(0)
            if status is not None:
                self._handle_exitstatus(status)
        return self.returncode

    def _wait(self, timeout):
        if self.returncode is not None:
            return self.returncode
        status = self._child.wait_status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        self._handle_exitstatus(status)
        return self.returncode

    def send_signal(self, sig):
        """``sig`` to the command; SIGKILL ends the command and every descendant."""
        if self.returncode is None and self._child is not None:
            self._child.signal(int(sig))

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)
