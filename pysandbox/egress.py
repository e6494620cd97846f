"""Network proxy mode, the launcher's side: the proxy's port and environment, and
:class:`Egress`, which serves one sandbox's egress proxy on the host for as long as
that sandbox lives.

The sandbox's network namespace is deny mode's (only ``lo``, up). Its setup, inside
that namespace and before the command exists, listens on ``127.0.0.1:PROXY_PORT`` (and
``[::1]:PROXY_PORT`` where the namespace has IPv6) and sends the listener(s) over a unix
socket of the launch (native: the LISTEN op of ``native/psb_util.c``; bwrap: our init's
``-p`` option). :meth:`Egress.start` receives them once the backend reports the command
executed and runs the engine (:mod:`pysandbox.proxy`) on them, on the host, in this
process: nothing inside the sandbox relays, and a client that connects at once finds
the listener there (the kernel queues its connection until the engine accepts it).
:meth:`Egress.close` ends it when the sandbox is reaped (``SandboxProcess``), a launch
fails, or the caller gives up. docs/ARCHITECTURE.md ("Network proxy mode") says why.
"""

from __future__ import annotations

import threading

from .errors import PolicyError, Reason, SetupError
from .policy import PROXY_BOUNDS, PROXY_ENV_NAMES, PROXY_PORT
from .records import TYPE_CHECKING

if TYPE_CHECKING:
    from .proxy.server import EgressProxy

def proxy_env(port: int = PROXY_PORT, userinfo: str = "") -> dict[str, str]:
    """The variables a proxy-mode command gets (both spellings; NO_PROXY is unset, never
    ``localhost``: inside, localhost is the sandbox's own loopback, which reaches nothing).
    ``userinfo``: ``user:password@``, a session command's credential (session_proxy.py)."""
    http = f"http://{userinfo}127.0.0.1:{port}"
    socks = f"socks5h://{userinfo}127.0.0.1:{port}"
    env = {}
    for name, value in (("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks)):
        env[name] = env[name.lower()] = value
    return env


def apply_proxy_env(env: dict[str, str], port: int = PROXY_PORT, userinfo: str = "") -> None:
    """Set the proxy variables in ``env`` over whatever it inherited (the caller's own
    HTTP_PROXY, a NO_PROXY list) and drop NO_PROXY/no_proxy."""
    for name in PROXY_ENV_NAMES:
        env.pop(name, None)
    env.update(proxy_env(port, userinfo))


def check_callback(on_event) -> None:
    if on_event is not None and not callable(on_event):
        raise PolicyError("on_proxy_event must be callable", Reason.INVALID_VALUE, on_event)


class Egress:
    """The host side of one sandbox's egress proxy.

    ``their_fd`` goes to the launch (``Launch.proxy_socket``); after the backend's spawn
    returned, :meth:`start` takes the listener(s) the setup sent (IPv4, and IPv6 where the
    namespace has it) and serves them with one engine (one thread, one connection budget);
    :meth:`close` stops it (idempotent). ``counts`` (``{"allowed": n,
    "refused": m}``) and ``events`` (:class:`pysandbox.proxy.events.ProxyEvent`, in time
    order) stay readable after close. The engine logs each event on the ``pysandbox``
    logger (``pysandbox.proxy.events``: refusals as warnings) and calls ``on_event`` on the
    proxy's thread (an exception it raises is logged, never reaches the proxy).
    ``bounds``: ``head_timeout``, ``idle_timeout``, ``max_connections``, the engine's
    (the policy's :class:`pysandbox.policy.Network` fields; default ``PROXY_BOUNDS``).
    ``tenants``: a session's (pysandbox/session_proxy.py): every connection must carry a
    live command's credential, and is recorded on that command, not here.

    Raises:
        PolicyError: an allow-list entry is invalid (``invalid_value``).
        TypeError: a bound that is not one of ``PROXY_BOUNDS``.
    """

    def __init__(self, hosts, *, on_event=None, resolver=None, port: int = PROXY_PORT, tenants=None, **bounds):
        from .proxy.rules import AllowList
        check_callback(on_event)
        self.port = port
        unknown = set(bounds) - set(PROXY_BOUNDS)
        if unknown:
            raise TypeError(f"Egress: unknown bounds {sorted(unknown)}")
        self._bounds = {**PROXY_BOUNDS, **bounds}
        self.allow = AllowList.from_strings(tuple(hosts))
        self._on_event = on_event
        self._resolver = resolver
        self.tenants = tenants   # a session's per-command credentials (pysandbox/proxy/tenants.py), or None
        self._engine: EgressProxy | None = None   # once start() made it
        self._lock = threading.Lock()
        self._closed = False
        import socket   # here, not at the top: a launch without the proxy does not pay for it
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    @property
    def their_fd(self) -> int:
        return self._theirs.fileno()

    def start(self) -> None:
        """Serve the listener(s) the sandbox's setup sent (it did, before the command was
        executed, or the launch failed). Call once the spawn returned.

        Raises:
            SetupError: no listener came (``setup_failed``, stage ``proxy listener``); the
                caller ends the sandbox.
        """
        import socket
        from .fdrecv import receive
        from .proxy.server import EgressProxy
        self._theirs.close()   # ours only now: the setup closed its copy
        try:
            _, fds = receive(self._ours, 1, 2, socket.MSG_DONTWAIT)   # close-on-exec (fdrecv.py)
        except (BlockingIOError, OSError):
            fds = []
        finally:
            self._ours.close()
        listeners = [socket.socket(fileno=fd) for fd in fds]
        if not listeners:
            raise SetupError("network proxy mode: the sandbox's setup sent no listener", Reason.SETUP_FAILED,
                             stage="proxy listener")
        with self._lock:
            if self._closed:
                for sock in listeners:
                    sock.close()
                return
            self._engine = EgressProxy(listeners, self.allow, resolver=self._resolver, on_event=self._on_event,
                                       tenants=self.tenants, **self._bounds)
            self._engine.start()

    def close(self) -> None:
        """Stop serving: the engine closed (its listeners, connections and thread).
        Idempotent; safe from any thread but the proxy's own."""
        with self._lock:
            self._closed = True
            engine = self._engine
        for sock in (self._ours, self._theirs):
            sock.close()
        if engine is not None:
            engine.close()

    @property
    def counts(self) -> dict[str, int]:
        engine = self._engine
        return {"allowed": 0, "refused": 0} if engine is None else engine.counts

    @property
    def events(self) -> list:
        engine = self._engine
        return [] if engine is None else engine.events   # recorded, so stamped, in order

    def __repr__(self):
        return f"<Egress 127.0.0.1:{self.port} {self.counts}>"
