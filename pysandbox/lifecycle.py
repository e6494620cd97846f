"""How a running sandbox is ended and how its end is reported, for every caller
(``run``, both command lines, and what is built on them).

- :func:`stop`: SIGTERM to the command, then, if it has not ended ``grace`` seconds
  later, SIGKILL to the whole sandbox (every descendant dies with its pid namespace).
- :func:`exit_status`: a returncode as a shell reports it (128+N for signal N).
"""

from __future__ import annotations

import signal

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
