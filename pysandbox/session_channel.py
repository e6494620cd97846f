"""The launcher's side of a session's socket (pysandbox/session.py): the
:class:`Channel` that sends frames and dispatches the server's events
(pysandbox/session_proto.py), a command's :class:`Command` record, and
:class:`RemoteChild`, the ``Child`` of one command for ``RemotePopen``."""

from __future__ import annotations

import array
import itertools
import os
import select
import signal
import socket
import threading
import time

from . import session_proto as W
from .errors import Reason, SessionError
from .session_limits import limits_failure

__all__ = ["Channel", "Command", "RemoteChild"]


class Command:
    __slots__ = ("pid", "failed", "status", "on_exit", "limits")

    def __init__(self):
        self.pid = None
        self.failed = None
        self.status = None
        self.on_exit = None   # called once (under the channel's lock) when it failed, ended or was lost
        self.limits = None    # its CommandLimits (pysandbox/session_limits.py), ended with its exit

    def ended(self, returncode: int | None = None) -> None:
        """It failed to start (``returncode`` None), exited or was lost: its limits and hook."""
        if self.limits is not None and returncode is not None:
            self.limits.finish(returncode)
        hook, self.on_exit = self.on_exit, None
        if hook is not None:
            hook()


class Channel:
    """The launcher's end of the socket to one server: sends frames, and turns events
    into per-command state. Any thread that waits reads the socket in turn (one at a
    time); the others wait on the condition."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.cv = threading.Condition()
        self.reading = False
        self.waiting = 0   # threads in wait_for's cv.wait (another reads the socket)
        self.buf = bytearray()
        self.commands: dict[int, Command] = {}
        self.ids = itertools.count(1)
        self.ready = False
        self.lost: SessionError | None = None
        self.send_lock = threading.Lock()
        self.external = False   # an event loop reads the socket (pysandbox/aio_session.py)

    def send(self, frame: bytes, fds=(), before: bytes = b"", before_fds=()) -> None:
        """``before`` (with ``before_fds``) then ``frame``, with nothing between."""
        with self.send_lock:
            try:
                if before:
                    self._send(before, before_fds)
                self._send(frame, fds)
            except OSError as exc:
                raise SessionError(f"the session's server is gone ({exc})", Reason.SESSION_LOST) from None

    def _send(self, data: bytes, fds) -> None:
        # socket.send_fds, without its call: the descriptors go with the first bytes
        sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]) if fds else 0
        if sent < len(data):
            self.sock.sendall(data[sent:])

    def wait_for(self, done, timeout: float | None) -> bool:
        """Read events until ``done()`` (called under the condition) or ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cv:
            while not done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if self.lost is not None:
                    return done()
                if self.reading or self.external:
                    self.waiting += 1
                    try:
                        self.cv.wait(left)
                    finally:
                        self.waiting -= 1
                    continue
                self.reading = True
                self.cv.release()
                try:
                    events, lost = self.read_events(left)
                finally:
                    self.cv.acquire()
                    self.reading = False
                self.dispatch(events, lost)
                if self.waiting:   # no other thread waits: no notify's own work
                    self.cv.notify_all()
            return True

    def read_events(self, timeout):
        try:
            if timeout is not None:   # none: the blocking recv alone (one syscall, as waitpid)
                ready, _, _ = select.select([self.sock], [], [], timeout)
                if not ready:
                    return [], None
            data = self.sock.recv(65536)
        except OSError as exc:
            return [], SessionError(f"the session's socket failed ({exc})", Reason.SESSION_LOST)
        if not data:
            return [], SessionError("the session's sandbox ended", Reason.SESSION_LOST)
        return W.events_of(data, self.buf), None

    def dispatch(self, events, lost):
        """Apply ``events`` (and a loss) read by :meth:`read_events`; the caller holds ``cv``
        (the channel's own reader, or the asyncio session's loop: pysandbox/aio_session.py)."""
        for ev in events:
            if ev.kind == W.READY:
                self.ready = True
                continue
            if ev.kind == W.ERROR:
                lost = SessionError(f"the session server stopped: {W.SERVER_ERRORS.get(ev.a, ev.a)}",
                                    Reason.SESSION_UNAVAILABLE)
                continue
            cmd = self.commands.get(ev.id)
            if cmd is None:
                continue
            if ev.kind == W.STARTED:   # a repeat (native/psb_session.c) carries the same pid
                cmd.pid = ev.a
            elif ev.kind == W.FAILED:
                cmd.failed = ev
                cmd.ended()
            elif ev.kind == W.EXITED:
                cmd.status = ev.a
                del self.commands[ev.id]
                cmd.ended(os.waitstatus_to_exitcode(ev.a))
        if lost is not None and self.lost is None:
            self.lost = lost
            for cmd in self.commands.values():   # the sandbox is gone, and they with it
                if cmd.pid is None and cmd.failed is None:
                    cmd.failed = W.Event(W.FAILED, 0, 0, 0)
                cmd.status = signal.SIGKILL
                cmd.ended(-signal.SIGKILL)
            self.commands.clear()


class RemoteChild:
    """A session command, as the Popen adapter sees it. ``on_close`` is called once,
    when its exit status has been collected (the pool discards its sandbox there)."""

    on_close = None

    def __init__(self, channel: Channel, cid: int, cmd: Command, argv0: str, cwd: str):
        self.channel, self.cid, self.cmd = channel, cid, cmd
        self.argv0, self.cwd = argv0, cwd
        self.pid = cmd.pid

    def started(self) -> int:
        """The command's pid once its STARTED came (the caller waited for it or for FAILED).

        Raises:
            SessionError (session_lost): the sandbox ended before the command started.
            OSError: the command could not be started (as subprocess raises it).
        """
        ch, cmd = self.channel, self.cmd
        if cmd.failed is not None:
            with ch.cv:
                ch.commands.pop(self.cid, None)
            if ch.lost is not None and cmd.failed.a == 0:
                raise SessionError(f"the session is lost: {ch.lost}", Reason.SESSION_LOST)
            if cmd.limits is not None:
                cmd.limits.finish(None)   # its deadline ends with it
            raise limits_failure(cmd.failed, cmd.limits) or W.failure(cmd.failed, self.argv0, self.cwd)
        self.pid = cmd.pid
        return self.pid

    def returncode(self, status: int) -> int:
        return os.waitstatus_to_exitcode(status)

    @property
    def limit(self) -> str | None:
        """The resource limit that ended the command, once its exit came (or None)."""
        return self.cmd.limits.result if self.cmd.limits is not None else None

    def wait_status(self, timeout):
        """The raw wait status, None while it runs. A quiet command (Sandbox.run) learns
        here that it could not start: raised as ``started`` raises it."""
        cmd = self.cmd
        if cmd.status is None:
            self.channel.wait_for(lambda: cmd.status is not None or cmd.failed is not None, timeout)
        if cmd.status is None and cmd.failed is not None:
            cmd.status = 127 << 8   # raised once, below; a later poll (__exit__, __del__) sees it ended
            self.started()
        return cmd.status

    def signal(self, sig: int) -> None:
        if self.cmd.status is None and self.channel.lost is None:
            try:
                self.channel.send(W.signal_frame(self.cid, sig))
            except SessionError:
                pass

    def close(self):
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook()
