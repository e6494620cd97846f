"""Sessions for asyncio: ``async with aio.Sandbox(policy) as sb: await sb.run(argv)``.

The sync :class:`pysandbox.session.Sandbox` is started on the loop's default executor;
then the loop reads its socket (``add_reader``) and dispatches the server's events into
the same channel state, resolving each command's exit future. A command is sent from
the loop's thread without waiting; its STARTED (or FAILED) is awaited as a future, and
its pipes become asyncio streams (pysandbox/aio_process.py). No polling, no thread.
"""

from __future__ import annotations

import asyncio
import os

from . import session as S
from .aio_process import Process, attach, binary_only, run_flow
from .errors import Reason, SessionError
from .lifecycle import KILL_GRACE


class Sandbox:
    """An asyncio session over ``policy`` on ``backend``; see the module.

    Raises (from ``start``/``async with``): as :class:`pysandbox.session.Sandbox`.
    """

    def __init__(self, policy=None, backend: str = "auto"):
        self.policy, self.backend = policy, backend
        self._sync: S.Sandbox | None = None
        self._loop = None
        self._exits: dict[int, tuple] = {}
        self._lane = asyncio.Lock()   # one send per loop turn: a burst cannot hold the loop

    @property
    def id(self) -> str:
        return self._sync.id if self._sync else ""

    @property
    def backend_name(self) -> str:
        return self._sync.backend_name if self._sync else ""

    async def start(self) -> "Sandbox":
        loop = asyncio.get_running_loop()
        self._sync = await loop.run_in_executor(None, lambda: S.Sandbox(self.policy, self.backend))
        self._loop = loop
        ch = self._sync.channel
        with ch.cv:
            ch.external = True   # from now on only the loop reads the socket
        loop.add_reader(ch.sock.fileno(), self._readable)
        return self

    def _readable(self) -> None:
        ch = self._sync.channel
        events, lost = ch.read_events(0)
        with ch.cv:
            ch.dispatch(events, lost)
            ch.cv.notify_all()
        if ch.lost is not None:
            self._loop.remove_reader(ch.sock.fileno())
        self._settle()

    async def create_subprocess_exec(self, *argv, stdin=None, stdout=None, stderr=None, cwd=None, env=None,
                                     pass_fds=(), limit: int = 2 ** 16, **kwargs) -> Process:
        """Start ``argv`` in this session, as :func:`pysandbox.aio.create_subprocess_exec`
        (plus ``cwd=`` inside the sandbox). ``kill()`` ends the command's whole tree.

        Raises:
            SessionError: not started, closed or lost.
            ValueError, PolicyError, FileNotFoundError, PermissionError: as
                :class:`pysandbox.session.SessionProcess`.
        """
        if self._sync is None:
            raise SessionError("the session is not started (use async with, or await start())",
                               Reason.SESSION_CLOSED)
        binary_only(kwargs)
        loop = asyncio.get_running_loop()
        # Sent from the loop's thread without waiting: the loop reads the STARTED.
        async with self._lane:
            popen = S.SessionProcess(self._sync, list(argv), stdin=stdin, stdout=stdout, stderr=stderr,
                                     cwd=cwd, env=env, pass_fds=pass_fds, bufsize=0, _deferred=True, **kwargs)
            await asyncio.sleep(0)
        child = popen.child
        started, fut = loop.create_future(), loop.create_future()
        self._exits[child.cid] = (child.cmd, fut, started)
        self._settle()
        try:
            await asyncio.shield(started)
            popen.pid = child.started()
        except BaseException:
            self._exits.pop(child.cid, None)
            if child.cmd.pid is not None:
                popen.kill()
            for f in (popen.stdin, popen.stdout, popen.stderr):
                if f is not None:
                    f.close()
            raise
        return await attach(popen, fut, limit=limit)

    def _settle(self) -> None:
        """Resolve the futures of the commands whose STARTED/FAILED or exit came."""
        for cid, (cmd, fut, started) in list(self._exits.items()):
            if not started.done() and (cmd.pid is not None or cmd.failed is not None):
                started.set_result(None)
            if cmd.status is not None:
                del self._exits[cid]
                if not started.done():
                    started.set_result(None)
                if not fut.done():
                    fut.set_result(os.waitstatus_to_exitcode(cmd.status))

    async def run(self, argv, *, input=None, capture_output: bool = False, timeout: float | None = None,
                  check: bool = False, kill_grace: float = KILL_GRACE, **kwargs):
        """Run ``argv`` in this session, as :func:`pysandbox.aio.run`: a timeout or a
        cancellation ends the command's whole tree; the session lives on."""
        if isinstance(argv, (str, bytes, os.PathLike)):
            argv = [argv]
        return await run_flow(lambda **kw: self.create_subprocess_exec(*argv, **kw), input=input,
                              capture_output=capture_output, timeout=timeout, check=check,
                              kill_grace=kill_grace, kwargs=kwargs)

    async def close(self) -> None:
        """End every process of the session (on the executor: it waits for the sandbox)."""
        sync, self._sync = self._sync, None
        if sync is None:
            return
        if not sync.closed and sync.channel.lost is None:
            self._loop.remove_reader(sync.channel.sock.fileno())
        await asyncio.get_running_loop().run_in_executor(None, sync.close)
        for _cid, (_cmd, fut, started) in list(self._exits.items()):
            for f in (started, fut):
                if not f.done():
                    f.set_result(-9)
        self._exits.clear()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()
