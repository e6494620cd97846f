"""The command lines' launch: a sandboxed command started and waited for without
:mod:`subprocess` (issue 28).

``subprocess`` brings ``locale`` (and with it ``re``), ``selectors``, ``math``,
``contextlib`` and ``warnings`` into a process that only starts one command and waits for
it: a tenth of the interpreter's own start-up. :class:`DirectProcess` is
:class:`~pysandbox.process.SandboxProcess`'s launch (the same
:class:`~pysandbox.sandbox_start.SandboxStart`: policy, plan, backend, environment,
limits, proxy, denial observer, and its ``send_signal``: SIGKILL ends the whole sandbox;
``kill``, ``terminate``, ``forward_signal``) with the few other Popen methods ``pysandbox
run`` and pybwrap use, written as Popen does them: ``wait(timeout)``, ``poll``,
``returncode``, ``pid``. No pipes, no ``communicate``: the command gets the caller's
descriptors 0, 1 and 2, or /dev/null for one given :data:`DEVNULL`. ``wait`` with a
timeout sleeps on the child's pidfd (:func:`pysandbox.lifecycle.reaped`; Popen polls with
sleeps); when the timeout passes it raises ``subprocess.TimeoutExpired``, importing
subprocess only then, so :func:`pysandbox.lifecycle.stop` treats both kinds alike.

The library API (``pysandbox.run``, ``Popen``, sessions) stays on SandboxProcess.
tests/integration/test_direct_process.py runs both side by side (exit codes, signals,
timeouts, stdio) and checks that a ``pysandbox run`` and a pybwrap launch import no
subprocess.
"""

from __future__ import annotations

import os
import _thread

from .lifecycle import reaped
from .sandbox_start import SandboxStart

DEVNULL = -3   # subprocess.DEVNULL's value (the unit test keeps them equal)


class DirectProcess(SandboxStart):
    """``args`` started in a sandbox, as ``SandboxProcess(args, **options)`` with
    ``stdin``/``stdout``/``stderr`` each None (the caller's) or :data:`DEVNULL`.

    Raises:
        what SandboxProcess raises; ValueError for any other stdio value.
    """

    def __init__(self, args, *, stdin=None, stdout=None, stderr=None, **options):
        self.returncode = None
        self._waitpid_lock = _thread.allocate_lock()   # threading.Lock, as Popen's: one reaper at a time
        for got in (stdin, stdout, stderr):
            if got not in (None, DEVNULL):
                raise ValueError(f"DirectProcess takes None or DEVNULL for stdio, not {got!r}")
        self.args = self._set_up(args, {}, **options)
        opened = []
        try:
            fds = []
            for slot, (given, flags) in enumerate(((stdin, os.O_RDONLY), (stdout, os.O_WRONLY),
                                                   (stderr, os.O_WRONLY))):
                if given is None:
                    fds.append(slot)
                else:
                    opened.append(os.open(os.devnull, flags | os.O_CLOEXEC))
                    fds.append(opened[-1])
            self._child = self._start_child(self.args, *fds)
        except BaseException:
            self._finish()
            raise
        finally:
            for fd in opened:
                os.close(fd)
        self.pid = self._child.pid
        self._started()

    def wait(self, timeout: float | None = None) -> int:
        """The returncode, once the command was reaped.

        Raises:
            subprocess.TimeoutExpired: ``timeout`` seconds passed first.
        """
        code = self.wait_for(timeout)
        if code is None:   # only with a timeout: wait_for(None) waits for the end
            import subprocess   # only now: a launch that never times out does not import it
            raise subprocess.TimeoutExpired(self.args, timeout if timeout is not None else 0.0)
        return code

    def wait_for(self, timeout: float | None) -> int | None:
        """The returncode once reaped (``timeout`` None: however long it takes), or None
        when ``timeout`` seconds passed first."""
        if self.returncode is not None:
            return self.returncode
        with self._waitpid_lock:
            if self.returncode is None:
                status = reaped(self.pid, timeout)
                if status is None:
                    return None
                self._handle_exitstatus(status)
        return self.returncode

    def poll(self) -> int | None:
        """The returncode if the command has ended (reaping it), else None; None also
        while another thread waits (it reaps)."""
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    status = reaped(self.pid, 0)
                    if status is not None:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _handle_exitstatus(self, status: int) -> None:
        try:
            self.returncode = self._child.returncode(status)
            self._child.close()
        finally:
            self._finish()
