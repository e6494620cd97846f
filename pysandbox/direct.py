"""The command lines' launch: a sandboxed command started and waited for without
:mod:`subprocess` (issue 28).

``subprocess`` brings ``locale`` (and with it ``re``), ``selectors``, ``math``,
``contextlib`` and ``warnings`` into a process that only starts one command and waits for
it: a tenth of the interpreter's own start-up. :class:`DirectProcess` is
:class:`~pysandbox.process.SandboxProcess`'s launch (the same
:class:`~pysandbox.sandbox_start.SandboxStart`: policy, plan, backend, environment,
limits, proxy, denial observer) with the few Popen methods ``pysandbox run`` and pybwrap
use, written as Popen does them: ``wait(timeout)``, ``poll``, ``send_signal`` (SIGKILL
ends the whole sandbox), ``kill``, ``terminate``, ``forward_signal``, ``returncode``,
``pid``. No pipes, no ``communicate``: the command gets the caller's descriptors 0, 1 and
2, or /dev/null for one given :data:`DEVNULL`. ``wait`` with a timeout sleeps on the
child's pidfd (Popen polls with sleeps); when the timeout passes it raises
``subprocess.TimeoutExpired``, importing subprocess only then, so
:func:`pysandbox.lifecycle.stop` treats both kinds alike.

The library API (``pysandbox.run``, ``Popen``, sessions) stays on SandboxProcess.
tests/unit/test_direct_process.py runs both side by side (exit codes, signals,
timeouts, stdio) and checks that a ``pysandbox run`` and a pybwrap launch import no
subprocess.
"""

from __future__ import annotations

import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)
import _thread
import time

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
                status = _reaped(self.pid, timeout)
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
                    status = _reaped(self.pid, 0)
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

    def send_signal(self, sig) -> None:
        """As SandboxProcess: SIGKILL ends the whole sandbox; any other signal goes to
        the command, through the backend."""
        if sig == signal.SIGKILL:
            if self.returncode is None:
                self._child.kill_sandbox()
            self.poll()
            if self.returncode is None:
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    pass
            return
        self.poll()
        self.forward_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _reaped(pid: int, timeout: float | None) -> int | None:
    """``pid``'s wait status once it exited (reaped here), or None when ``timeout``
    seconds passed first (0: a poll). ECHILD (something else reaped it) reads as status
    0, as Popen's. Sleeps on the pidfd, or in Popen's growing steps where there is none."""
    try:
        if timeout is None:
            return os.waitpid(pid, 0)[1]   # a signal handler's run does not end it (PEP 475)
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid or timeout <= 0:
            return status if got == pid else None
        import select   # here: a wait without a timeout (the common one) needs none (issue 28)
        deadline = time.monotonic() + timeout
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None
        try:
            delay = 0.0005
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if fd is not None:
                    select.select([fd], [], [], left)
                else:
                    time.sleep(min(delay, left))
                    delay = min(delay * 2, 0.05)
                got, status = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    return status
        finally:
            if fd is not None:
                os.close(fd)
    except ChildProcessError:
        return 0
