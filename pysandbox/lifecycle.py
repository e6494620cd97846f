"""How a running sandbox is ended, waited for and how its end is reported, for every
caller (``run``, both command lines, and what is built on them).

- :func:`stop`: SIGTERM to the command, then, if it has not ended ``grace`` seconds
  later, SIGKILL to the whole sandbox (every descendant dies with its pid namespace).
- :func:`exit_status`: a returncode as a shell reports it (128+N for signal N).
- :func:`reaped`: a child's wait status once it exited, reaped (bounded or not; 0 when
  something else reaped it, as Popen reads ECHILD); :func:`exited`: until a child has
  exited, left for its owner to reap, bounded. Both wait through :func:`_until`: asleep
  on the child's pidfd, or in Popen's growing steps where there is none.
"""

from __future__ import annotations

import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)
import time

KILL_GRACE = 2.0   # seconds between SIGTERM to the command and SIGKILL to the sandbox


# Seconds a timed-out run still reads its output once the command ended: a process of
# another session command may hold its pipes (sent over a unix socket), and EOF would
# then never come; one-shot sandboxes end with their command, EOF at once.
DRAIN_AFTER_END = 1.0


def stop(proc, grace: float = KILL_GRACE, *, wait=None):
    """End ``proc`` (a :class:`~pysandbox.process.SandboxProcess`): SIGTERM to the
    command; SIGKILL to the sandbox if it is still running ``grace`` seconds later.

    ``wait(timeout)`` waits for the end and returns what the caller wants back
    (default ``proc.wait``; ``run`` passes ``proc.communicate`` to keep the output).
    Returns what the last ``wait`` returned.

    Raises:
        Nothing of its own: whatever ``wait(None)`` raises.
    """
    import subprocess   # here: the command lines' --help imports this module
    if wait is None:
        def wait(timeout):
            return proc.wait(timeout=timeout)
    proc.send_signal(signal.SIGTERM)
    try:
        return wait(max(grace, 0))
    except subprocess.TimeoutExpired:
        proc.kill()
        return wait(None)


def exit_status(returncode: int) -> int:
    """The exit status a shell gives a command that ended with ``returncode``: its own,
    or 128+N when signal N killed it (returncode -N)."""
    return 128 - returncode if returncode < 0 else returncode


def reaped(pid: int, timeout: float | None) -> int | None:
    """``pid``'s wait status once it exited (reaped here), or None when ``timeout``
    seconds passed first (0: a poll; None: however long it takes). ECHILD (something
    else reaped it) reads as status 0, as Popen's (``DirectProcess``,
    ``BackendPopen.reap_exited``)."""
    try:
        if timeout is None:
            return os.waitpid(pid, 0)[1]   # a signal handler's run does not end it (PEP 475)

        def status():
            got, sts = os.waitpid(pid, os.WNOHANG)
            return sts if got == pid else None
        return _until(pid, timeout, status)
    except ChildProcessError:
        return 0


def exited(pid: int, timeout: float) -> bool:
    """Until process ``pid`` (a child of ours) has exited or ``timeout`` has passed; True
    once it has. It is not reaped: its owner's wait does that (``Sandbox.close``,
    pysandbox/session.py, whose server is a SandboxProcess; where subprocess's
    ``wait(timeout)`` would poll with sleeps of up to 50 ms, a pool's threads close a
    sandbox after each command). ECHILD (already reaped) reads as exited."""
    try:
        return _until(pid, timeout,
                      lambda: os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)) is not None
    except ChildProcessError:
        return True


def _until(pid: int, timeout: float, ended):
    """``ended()`` (not None once ``pid`` has exited) until it answers or ``timeout``
    seconds have passed (then None; 0: one look). Sleeps on the pidfd, or in Popen's
    growing steps (0.5 to 50 ms) where there is none."""
    got = ended()
    if got is not None or timeout <= 0:
        return got
    import select   # here: a launch that is not stopped needs none (issue 28)
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
            got = ended()
            if got is not None:
                return got
    finally:
        if fd is not None:
            os.close(fd)
