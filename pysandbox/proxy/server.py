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
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import socket
import threading
import time

from .events import REFUSED, ProxyEvent, deliver
from .handler import Connection
from .httphead import MAX_HEAD
from .rules import AllowList

__all__ = ["EgressProxy", "host_resolver"]

logger = logging.getLogger("pysandbox.proxy")


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
    ``max_connections`` bounds the connections served at once (more are closed at
    once, each a ``too_many_connections`` event); ``handshake_timeout`` bounds each
    phase before the relay (the request, the TLS ClientHello), ``resolve_timeout`` and
    ``connect_timeout`` the resolution and each connection attempt. At most
    ``log_burst`` refusals a second are logged (a hostile command must not flood the
    launcher's log); the others are counted in one warning when the next second's first
    refusal comes, or at close. Every event is still kept, counted and given to
    ``on_event``.

    Raises:
        TypeError: a listener is not a stream socket, there is none, or ``allow`` is not an
            AllowList.
    """

    def __init__(self, listener: socket.socket, allow: AllowList, *, resolver=None, on_event=None,
                 max_connections: int = 1024, max_events: int = 10000, handshake_timeout: float = 20.0,
                 resolve_timeout: float = 10.0, connect_timeout: float = 10.0, log_burst: int = 20):
        listeners = [listener] if isinstance(listener, socket.socket) else list(listener)
        if not listeners or any(not isinstance(sock, socket.socket) or sock.type != socket.SOCK_STREAM
                                for sock in listeners):
            raise TypeError("listener must be a listening SOCK_STREAM socket, or a sequence of them")
        if not isinstance(allow, AllowList):
            raise TypeError("allow must be an AllowList (AllowList.from_strings([...]))")
        self.allow = allow
        self.resolver = resolver if resolver is not None else host_resolver
        self.on_event = on_event
        self.max_connections = max_connections
        self.handshake_timeout = handshake_timeout
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
        self._limit_logged = -1e9
        self.log_burst = log_burst
        self._log_window = -1e9   # start of the current second of refusal logging
        self._log_count = 0       # refusals logged in it
        self._log_dropped = 0     # refusals not logged since the last summary

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

    def _record(self, event: ProxyEvent, log: bool = True) -> None:
        dropped = 0
        with self._lock:
            self._events.append(event)
            self._counts[event.verdict] = self._counts.get(event.verdict, 0) + 1
            if log and event.verdict == REFUSED:
                now = time.monotonic()
                if now - self._log_window >= 1.0:
                    dropped, self._log_dropped = self._log_dropped, 0
                    self._log_window, self._log_count = now, 0
                log = self._log_count < self.log_burst
                if log:
                    self._log_count += 1
                else:
                    self._log_dropped += 1
        self._log_dropped_summary(dropped)
        deliver(event, self.on_event, log)

    def _log_dropped_summary(self, dropped: int) -> None:
        if dropped:
            logger.warning("proxy: %d more refused connections were not logged (more than %d a second); "
                           "each is counted and given to on_event", dropped, self.log_burst)

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
                with self._lock:
                    dropped, self._log_dropped = self._log_dropped, 0
                self._log_dropped_summary(dropped)

    def _close_listeners(self) -> None:
        for sock in self._listeners:
            sock.close()

    async def _main(self, loop) -> None:
        self._stop = asyncio.Event()
        servers = [await asyncio.start_server(self._accepted, sock=sock, limit=MAX_HEAD,
                                              backlog=min(self.max_connections, 4096))
                   for sock in self._listeners]
        with self._lock:
            self._loop = loop
            closed = self._closed
        self._ready.set()
        if not closed:
            await self._stop.wait()
        for server in servers:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        try:
            await asyncio.wait_for(asyncio.gather(*(server.wait_closed() for server in servers)), 5)
        except asyncio.TimeoutError:
            logger.error("the proxy's connections did not close in time")

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._tasks) >= self.max_connections:
            writer.close()
            # a flood is counted and delivered in full, logged at most once a second
            now = time.monotonic()
            log = now - self._limit_logged >= 1.0
            if log:
                self._limit_logged = now
            self._record(ProxyEvent(time=time.time(), host="", port=0, verdict=REFUSED,
                                    reason="too_many_connections", protocol=""), log)
            return
        self._tasks.add(task)
        try:
            await Connection(self, reader, writer).run()
        except asyncio.CancelledError:
            pass
        except Exception:   # noqa: BLE001 - one connection's bug must not stop the proxy
            logger.exception("proxy connection failed")
            writer.close()
        finally:
            self._tasks.discard(task)
