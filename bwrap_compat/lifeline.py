"""``--die-with-parent`` for the pybwrap process itself, as bwrap's monitor does it.

bwrap calls ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in its own (monitor) process as well
as in the sandbox, so a bwrap whose parent dies goes with it and releases its
``--lock-file`` locks. pybwrap does the same from :func:`bind_to_parent`, called by
the ``pybwrap`` entry point only (never by a library caller of :mod:`bwrap_compat`,
whose own process must not acquire a parent-death signal).

The death signal is a per-thread attribute of the *receiving* task: it is set on
the calling thread, which must be the one that lives as long as pybwrap (the main
thread, which waits for the sandbox). It fires when the *thread* of the parent that
forked pybwrap exits, as for bwrap: a parent that spawns bwrap from a short-lived
thread loses it with that thread, whichever program it spawns.

Closing the race: a parent that died before the prctl is seen by ``getppid()`` no
longer being the pid recorded at start-up; pybwrap then ends itself as the signal
would have (bwrap has no such check: its window runs from its exec to the clone).
The window left is the interpreter's start, before the pid is recorded.
"""

from __future__ import annotations

import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)

PR_SET_PDEATHSIG = 1


def bind_to_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent (``parent_pid``, read at start-up) dies;
    if it already has, die now. Call from the main thread, before any lock is taken.

    Raises:
        OSError: prctl failed (bwrap: "prctl").
        RuntimeError: called from a thread other than the main one.
    """
    import threading   # here: only with --die-with-parent (a launch imports no threading: issue 28)
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("bind_to_parent must run on the main thread (PR_SET_PDEATHSIG is per thread)")
    import ctypes   # only with --die-with-parent: pybwrap's start-up imports no ctypes otherwise
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl: {os.strerror(err)}")
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
