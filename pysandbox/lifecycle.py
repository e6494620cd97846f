"""How a running sandbox is ended and how its end is reported, for every caller
(``run``, both command lines, and what is built on them).

- :func:`stop`: SIGTERM to the command, then, if it has not ended ``grace`` seconds
  later, SIGKILL to the whole sandbox (every descendant dies with its pid namespace).
- :func:`exit_status`: a returncode as a shell reports it (128+N for signal N).
- :func:`exited`: until a child process has exited (its pidfd), bounded.
"""

from __future__ import annotations

import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)

KILL_GRACE = 2.0   # seconds between SIGTERM to the command and SIGKILL to the sandbox


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


def exited(pid: int, timeout: float) -> None:
    """Until process ``pid`` (a child of ours, not reaped) has exited or ``timeout`` has
    passed: woken by its pidfd at once, where subprocess's ``wait(timeout)`` would poll
    with sleeps of up to 50 ms (``Sandbox.close``, pysandbox/session.py: a pool's threads
    close a sandbox after each command). Without pidfds, returns at once (the caller's
    wait decides)."""
    import select   # here: a launch that is not stopped needs none (issue 28)
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
