"""EgressProxy: the host side of ``network="proxy"``, an HTTP (absolute-form and
``CONNECT``) and SOCKS5 proxy that relays only to the allow list's hosts.

It serves already listening TCP sockets (made by the launch inside the sandbox's
network namespace, IPv4 and IPv6, and handed to the launcher) on one asyncio loop in one
daemon thread of the caller's process, and makes its own connections in that process's (the host's)
network namespace. ``start()`` returns once the loop serves; ``close()`` stops
accepting, closes every connection and the listener, and joins the thread and the
resolver threads, in bounded time. Each connection is handled by
pysandbox/proxy/handler.py; its event (pysandbox/proxy/events.py) is counted, kept
(the last ``max_events``) and delivered.

What a hostile command can make the launcher pay is bounded here: the connections
served at once fit the process's descriptor budget (pysandbox/proxy/budget.py); at the
budget the proxy stops accepting (the clients wait in the kernel's backlog of the
sandbox's listener and cost the launcher nothing), an ``accept()`` that fails for want
of descriptors or memory pauses accepting for :data:`ACCEPT_PAUSE` seconds, and every
line this engine or its loop writes to the log goes through one :class:`LogThrottle`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import errno
import logging
import select
import socket
import threading
import time

from .. import logs as _logs
from ..records import TYPE_CHECKING
from . import budget
from .events import REFUSED, LogThrottle, ProxyEvent, deliver
from .handler import Connection
from .httphead import MAX_HEAD
from .rules import AllowList

__all__ = ["EgressProxy", "host_resolver"]

if TYPE_CHECKING:
    from collections.abc import Sequence

logger = _logs.logger("pysandbox.proxy")

BACKLOG = 4096            # the listener's queue: the clients waiting while the proxy is at its budget
ACCEPT_PAUSE = 0.5        # seconds without accept() after it failed for want of descriptors/memory
_RECHECK = 0.5            # at the budget: how often the shared pool is looked at again
_REMEASURE = 1.0          # ... and the descriptor table measured again, at most this often
# accept(2): errors of the connection being accepted (it went away), to skip at once
_CLIENT_GONE = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.ENETDOWN, errno.ENOPROTOOPT, errno.EHOSTDOWN,
                          errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH, errno.EPERM,
                          errno.EINTR})
# the log lines of each kind (LogThrottle) and what their summary calls them
_NOT_LOGGED = {"event": "connection events", "limit": "reports of the connection budget",
               "accept": "failed accepts", "internal": "internal errors", "callback": "on_event failures"}


def host_resolver(host: str, port: int) -> list[str]:
    """The default resolver: the host's ``getaddrinfo`` (TCP), each address once, in order."""
    out: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sockaddr[0] not in out:
            out.append(sockaddr[0])
    return out


class EgressProxy:
    """An allow-list proxy on ``listener``: a socket or a sequence of sockets, each bound
    and listening, TCP; the proxy owns them from now on and closes them. One loop, one
    thread and one connection budget serve them all; ``address`` is the first one's.

    ``resolver(host, port) -> [address text, ...]`` resolves names (default
    :func:`host_resolver`; tests pass a mapping to their own addresses). ``on_event``
    gets every :class:`ProxyEvent`, on the proxy's thread; its exceptions are logged.

    ``max_connections`` caps the connections served at once; the budget is the smaller
    of it and what the process's descriptor pool allows (pysandbox/proxy/budget.py: the
    soft RLIMIT_NOFILE less a reserve and what is open, two descriptors a connection;
    :attr:`budget`). At the budget the proxy stops accepting until a connection ends: a
    client waits in the listener's backlog, costing the launcher nothing; one
    ``too_many_connections`` event each time a client finds the budget used up after the
    backlog was empty. ``head_timeout`` bounds the client's
    request (its whole head: a slowloris is closed, ``timeout``) and, through a tunnel,
    the TLS ClientHello; ``resolve_timeout`` and ``connect_timeout`` the resolution and
    each connection attempt; ``idle_timeout`` closes a relayed connection through which
    no byte went either way for that long. At most ``log_burst`` events a second are
    logged (a hostile command must not flood the launcher's log); the others are counted
    in one warning when the next second's first event comes, or at close; failed
    accepts, internal errors (the loop's exception handler included) and failures of
    ``on_event`` are logged at most once a second. Every event is still kept, counted
    and given to ``on_event``.

    Raises:
        TypeError: a listener is not a stream socket, there is none, or ``allow`` is not an
            AllowList.
        ValueError: a timeout that is not a positive number, or a negative ``max_connections``.
    """

    def __init__(self, listener: socket.socket | Sequence[socket.socket], allow: AllowList, *, resolver=None,
                 on_event=None,
                 max_connections: int = 1024, max_events: int = 10000, head_timeout: float = 10.0,
                 idle_timeout: float = 300.0, resolve_timeout: float = 10.0, connect_timeout: float = 10.0,
                 log_burst: int = 20, tenants=None):
        listeners = [listener] if isinstance(listener, socket.socket) else list(listener)
        if not listeners or any(not isinstance(sock, socket.socket) or sock.type != socket.SOCK_STREAM
                                for sock in listeners):
            raise TypeError("listener must be a listening SOCK_STREAM socket, or a sequence of them")
        if not isinstance(allow, AllowList):
            raise TypeError("allow must be an AllowList (AllowList.from_strings([...]))")
        for name, value in (("head_timeout", head_timeout), ("idle_timeout", idle_timeout),
                            ("resolve_timeout", resolve_timeout), ("connect_timeout", connect_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
                raise ValueError(f"{name} must be a positive number of seconds: {value!r}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 0:
            raise ValueError(f"max_connections must be a non-negative integer: {max_connections!r}")
        self.allow = allow
        self.tenants = tenants    # a session's credentials (pysandbox/proxy/tenants.py): each connection needs one
        self.resolver = resolver if resolver is not None else host_resolver
        self.on_event = on_event
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.resolve_timeout = resolve_timeout
        self.connect_timeout = connect_timeout
        self.address = listeners[0].getsockname()
        self._listeners = listeners
        self._lock = threading.Lock()
        self._events: collections.deque = collections.deque(maxlen=max_events)
        self._counts = {"allowed": 0, "refused": 0}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._closed = False
        self._tasks: set = set()
        self._slots = 0           # connections of the pool this engine holds (served, or being accepted)
        self._fds = 0             # descriptors its connections hold
        self._room: asyncio.Event | None = None   # set when one of ours ended
        self._at_budget = False   # waiting for room since the last too_many_connections event
        self._measured = -1e9
        self._pool = budget.POOL
        self.log_burst = log_burst
        self._throttle = LogThrottle(log_burst)

    # ---------------------------------------------------------------- what it saw

    @property
    def counts(self) -> dict:
        """``{"allowed": n, "refused": m}``: connections decided so far."""
        with self._lock:
            return dict(self._counts)

    @property
    def events(self) -> list:
        """The last ``max_events`` events, oldest first."""
        with self._lock:
            return list(self._events)

    @property
    def active(self) -> int:
        """Connections being served now."""
        return len(self._tasks)

    @property
    def budget(self) -> int:
        """The most connections this engine serves at once, as of the last measure:
        ``min(max_connections, the process pool's limit)``."""
        return min(self.max_connections, self._pool.limit)

    def _record(self, event: ProxyEvent, log: bool = True, tenant=None) -> None:
        """Keep, count, log and deliver ``event``: on ``tenant`` (a session's command,
        with its own ``on_event``) when the connection was attributed to one, else here."""
        if tenant is not None:
            tenant.record(event)
        else:
            with self._lock:
                self._events.append(event)
                self._counts[event.verdict] = self._counts.get(event.verdict, 0) + 1
        if log:
            log = self._admit("event")
        deliver(event, self.on_event if tenant is None else tenant.on_event, log, failed=self._callback_failed)

    def _admit(self, kind: str, burst: int | None = None) -> bool:
        """May a line of ``kind`` be logged now? Reports the lines of that kind dropped."""
        ok, dropped = self._throttle.admit(kind, burst)
        self._summary(kind, dropped)
        return ok

    def _summary(self, kind: str, dropped: int) -> None:
        if dropped and kind == "event":
            logger.warning("proxy: %d more %s were not logged (more than %d a second); each event is counted "
                           "and given to on_event", dropped, _NOT_LOGGED[kind], self.log_burst)
        elif dropped:
            logger.warning("proxy: %d more %s were not logged (more than 1 a second)", dropped,
                           _NOT_LOGGED.get(kind, kind))

    def _log_once_a_second(self, kind: str, level: int, msg: str, *args, exc_info=None) -> None:
        if self._admit(kind, 1):
            logger.log(level, msg, *args, exc_info=exc_info)

    def _callback_failed(self) -> None:
        self._log_once_a_second("callback", logging.ERROR, "proxy on_event callback failed", exc_info=True)

    def _loop_exception(self, loop, context) -> None:
        """The loop's exception handler: asyncio's default one logs a traceback for every
        call, and what calls it (failed accepts, transports' errors, tasks' exceptions
        never retrieved) a client can repeat at will."""
        exc = context.get("exception")
        self._log_once_a_second("internal", logging.ERROR, "proxy: %s", context.get("message", "asyncio error"),
                                exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)

    # ---------------------------------------------------------------- life

    def start(self) -> None:
        """Serve in a daemon thread; return once it accepts connections.

        Raises:
            RuntimeError: already started or closed, or the loop could not start.
        """
        with self._lock:
            if self._thread is not None or self._closed:
                raise RuntimeError("EgressProxy.start(): already started or closed")
            self._thread = threading.Thread(target=self._run, name="pysandbox-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            self._thread.join()
            raise RuntimeError(f"the proxy could not start: {self._failed}") from self._failed

    def close(self, timeout: float = 10.0) -> None:
        """Stop accepting, close every connection and the listener, join the threads.
        Idempotent; waits at most about ``timeout`` seconds."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            self._close_listeners()
            return
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass   # the loop already ended
        if thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.error("the proxy thread did not end within %s s", timeout)

    def __enter__(self) -> "EgressProxy":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._loop_exception)
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=8,
                                                         thread_name_prefix="pysandbox-proxy-resolve")
        loop.set_default_executor(executor)
        try:
            loop.run_until_complete(self._main(loop))
        except BaseException as exc:   # noqa: BLE001 - reported by start(), or logged
            if not self._ready.is_set():
                self._failed = exc
            else:
                logger.exception("the proxy loop failed")
        finally:
            self._ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                executor.shutdown(wait=True, cancel_futures=True)
                loop.close()
                self._close_listeners()
                self._return_to_pool()
                if self.tenants is not None:
                    self.tenants.close()
                for kind, dropped in self._throttle.flush().items():
                    self._summary(kind, dropped)

    def _close_listeners(self) -> None:
        for sock in self._listeners:
            sock.close()

    async def _main(self, loop) -> None:
        self._stop = asyncio.Event()
        self._room = asyncio.Event()
        self._measure()
        for sock in self._listeners:
            sock.setblocking(False)
            sock.listen(BACKLOG)
        acceptors = [loop.create_task(self._accept_loop(sock)) for sock in self._listeners]
        with self._lock:
            self._loop = loop
            closed = self._closed
        if self.tenants is not None:
            self.tenants.loop = loop
        self._ready.set()
        if not closed:
            await self._stop.wait()
        for task in acceptors:
            task.cancel()
        await asyncio.gather(*acceptors, return_exceptions=True)
        self._close_listeners()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            if pending:
                logger.error("the proxy's connections did not close in time")

    # ---------------------------------------------------------------- accepting

    def _measure(self) -> None:
        self._measured = time.monotonic()
        limit = self._pool.measure()
        if limit == 0:
            self._log_once_a_second("limit", logging.WARNING,
                                    "proxy: the launcher's descriptor limit (soft RLIMIT_NOFILE %d, %d open, %d "
                                    "kept in reserve) leaves no room for a connection", self._pool.soft,
                                    self._pool.others, self._pool.reserve)

    async def _accept_loop(self, sock: socket.socket) -> None:
        """Accept on ``sock`` while the budget has room: a client is accepted only once
        its slot is taken, so at the budget nothing is accepted (and nothing costs a
        descriptor) until a connection ends."""
        loop = asyncio.get_running_loop()
        while True:
            if await self._readable(loop, sock):
                self._at_budget = False   # no client was waiting: the next wait at the budget is news
            await self._take_slot()
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                self._give_slot()
                continue
            except OSError as exc:
                self._give_slot()
                if exc.errno in _CLIENT_GONE:
                    continue
                self._log_once_a_second("accept", logging.WARNING,
                                        "proxy: accept() failed: %s; not accepting for %g s (the launcher is short "
                                        "of descriptors or memory)", exc, ACCEPT_PAUSE)
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            except BaseException:
                self._give_slot()
                raise
            self.descriptors(1)
            task = loop.create_task(self._serve(conn))
            self._tasks.add(task)

    @staticmethod
    async def _readable(loop, sock: socket.socket) -> bool:
        """Return once a client waits on ``sock``; True when none did at first."""
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN)
        if poll.poll(0):
            return False
        ready = loop.create_future()
        loop.add_reader(sock.fileno(), lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(sock.fileno())
        return True

    async def _take_slot(self) -> None:
        """Return once this engine holds one more slot of the pool (waiting while the
        budget, ``max_connections`` or the pool's limit, is used up)."""
        while True:
            if self._slots < self.max_connections and self._pool.take():
                self._slots += 1
                return
            if not self._at_budget:
                self._at_budget = True
                log = self._admit("limit", 1)
                self._record(ProxyEvent(time=time.time(), host="", port=0, verdict=REFUSED,
                                        reason="too_many_connections", protocol=""), log)
            self._room.clear()
            try:
                # ours ending sets _room; another engine's ending is seen at the next look
                await asyncio.wait_for(self._room.wait(), _RECHECK)
            except asyncio.TimeoutError:
                pass
            if time.monotonic() - self._measured >= _REMEASURE:
                self._measure()

    def descriptors(self, n: int) -> None:
        """``n`` descriptors more (or fewer) held by this engine's connections."""
        self._fds += n
        if n > 0:
            self._pool.opened(n)
        else:
            self._pool.closed(-n)

    def _return_to_pool(self) -> None:
        """At the end: what connections the loop could not close in time still held."""
        for _ in range(max(0, self._slots)):
            self._pool.give()
        self._pool.closed(max(0, self._fds))
        self._slots = self._fds = 0

    def _give_slot(self) -> None:
        self._slots -= 1
        self._pool.give()
        self._room.set()

    async def _serve(self, conn: socket.socket) -> None:
        task = asyncio.current_task()
        writer = None
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEAD)
            await Connection(self, reader, writer).run()
        except asyncio.CancelledError:
            pass
        except Exception:   # noqa: BLE001 - one connection's bug must not stop the proxy
            self._log_once_a_second("internal", logging.ERROR, "proxy connection failed", exc_info=True)
        finally:
            if writer is not None:
                writer.close()
            else:
                conn.close()
            self.descriptors(-1)
            self._tasks.discard(task)
            self._give_slot()
