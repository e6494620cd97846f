"""The asyncio API, following :mod:`asyncio.subprocess` and :func:`pysandbox.run`:

    from pysandbox import aio
    done = await aio.run(["make", "test"], policy=policy, capture_output=True, timeout=60)
    proc = await aio.create_subprocess_exec("cat", policy=policy, stdin=aio.PIPE, stdout=aio.PIPE)
    async with aio.Sandbox(policy) as sb:          # a session (pysandbox/session.py)
        done = await sb.run(["pytest", "-q"], capture_output=True, timeout=600)

One-shot sandboxes are set up by the sync launcher (:class:`pysandbox.process.SandboxProcess`)
on the loop's default executor, so the loop never blocks on it; their pipes become
asyncio streams and their end is learnt from a pidfd registered with the loop (no
polling, no thread per process). A session's events are read by the loop from its
socket. Killing ends the whole sandbox (one-shot) or the command's whole tree (session).
The pieces are in pysandbox/aio_process.py and pysandbox/aio_session.py.
"""

from __future__ import annotations

import asyncio
import os

from .aio_process import Process, discard_process, Handoff, attach, binary_only, run_flow, stop, watch_exit
from .aio_session import Sandbox
from .lifecycle import KILL_GRACE
from .process import DEVNULL, PIPE, STDOUT, CompletedProcess, SandboxProcess

__all__ = ["DEVNULL", "PIPE", "STDOUT", "Process", "Sandbox", "attach", "create_subprocess_exec", "run", "stop",
           "watch_exit"]

async def create_subprocess_exec(*argv, policy=None, backend: str = "auto", stdin=None, stdout=None,
                                 stderr=None, env=None, pass_fds=(), limit: int = 2 ** 16,
                                 **kwargs) -> Process:
    """Start ``argv`` in a sandbox, as :func:`asyncio.create_subprocess_exec`.

    ``stdin``/``stdout``/``stderr`` take PIPE, DEVNULL, STDOUT (stderr), a descriptor or
    a file, as subprocess. Other keyword arguments go to :class:`SandboxProcess`
    (``on_start``, ``close_in_setup``); text mode is refused, as asyncio refuses it.
    The setup runs on the loop's default executor. Cancelled while it runs, the
    sandbox is killed and reaped once it exists.

    Raises:
        ValueError: text mode or a ``bufsize`` was asked for.
        PolicyError, BackendUnavailable, CapabilityUnavailable, SetupError,
        FileNotFoundError, PermissionError: as :class:`SandboxProcess`.
    """
    binary_only(kwargs)
    loop = asyncio.get_running_loop()
    handoff = Handoff(lambda: SandboxProcess(list(argv), policy=policy, backend=backend, stdin=stdin,
                                              stdout=stdout, stderr=stderr, env=env, pass_fds=pass_fds,
                                              bufsize=0, **kwargs))
    try:
        popen = await loop.run_in_executor(None, handoff.start)
    except asyncio.CancelledError:
        handoff.abandon(loop)
        raise
    try:
        return await attach(popen, watch_exit(popen), limit=limit)
    except BaseException:
        loop.run_in_executor(None, discard_process, popen)
        raise


async def run(argv, *, policy=None, backend: str = "auto", input=None, capture_output: bool = False,
              timeout: float | None = None, check: bool = False, kill_grace: float = KILL_GRACE,
              **kwargs) -> CompletedProcess:
    """Run ``argv`` in a sandbox and wait for it, as :func:`pysandbox.run`.

    When ``timeout`` passes, the command gets SIGTERM; if it has not exited
    ``kill_grace`` seconds later the whole sandbox is killed; TimeoutExpired carries the
    output read until then. When the awaiting task is cancelled, the whole sandbox is
    killed and reaped, and CancelledError propagates. Either way every descendant
    dies with the sandbox.

    Raises:
        TimeoutExpired: the timeout passed; the sandbox is gone.
        CalledProcessError: ``check`` and a non-zero returncode.
        asyncio.CancelledError: the task was cancelled; the sandbox is gone.
        ValueError, PolicyError, BackendUnavailable, CapabilityUnavailable, SetupError,
        FileNotFoundError, PermissionError: as :func:`create_subprocess_exec`.
    """
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    return await run_flow(lambda **kw: create_subprocess_exec(*argv, policy=policy, backend=backend, **kw),
                          input=input, capture_output=capture_output, timeout=timeout, check=check,
                          kill_grace=kill_grace, kwargs=kwargs)
