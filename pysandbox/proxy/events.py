"""The proxy's events: one record per connection, allowed or refused, with its byte
counts; the stable reason codes; the delivery to the caller and the logger.

A refused connection's event is emitted when it is refused; an allowed one's when the
connection ends, with the bytes relayed each way (``bytes_up``: client to upstream,
``bytes_down``: upstream to client); a connection closed before its first byte is
no event. Every event goes to the caller's ``on_event`` and to the ``pysandbox.proxy``
logger (refusals at WARNING, the rest at INFO), through a :class:`LogThrottle`: the
sandbox decides how many connections it makes, so nothing it does may write more than a
few lines a second to the launcher's log (or a ``--verbose`` terminal).
"""

from __future__ import annotations

import threading
import time

from ..records import dataclass
from .. import logs as _logs

__all__ = ["ALLOWED", "REFUSED", "REASONS", "LogThrottle", "ProxyEvent", "printable"]

logger = _logs.logger("pysandbox.proxy")

ALLOWED = "allowed"
REFUSED = "refused"

# reason code -> what it means (the README's proxy section lists the same codes)
REASONS = {
    "ok": "allowed: the connection was relayed",
    "not_allowed": "the host and port are not on the allow list",
    "ip_literal_not_listed": "an IP address was requested that is not listed as such",
    "special_address": "the name resolved to a loopback, private, link-local or other special address that is not listed",
    "resolve_failed": "the name did not resolve on the host",
    "connect_failed": "no resolved address accepted the connection",
    "sni_mismatch": "the TLS ClientHello names another host than the one requested",
    "sni_missing": "the TLS ClientHello names no host (a name was requested)",
    "not_tls": "a TLS port was requested and the client did not start TLS",
    "bad_request": "the client's request was malformed, unsupported or too large",
    "timeout": "the client was too slow to send its request",
    "too_many_connections": "the proxy's connection budget was reached: it stopped accepting until a connection ends",
    "unsupported_command": "a SOCKS5 command other than CONNECT",
    "closed": "the proxy was closed while the connection was being set up",
    "proxy_auth_required": "a session's proxy: no credential, or not one of a running command of the session",
}


@dataclass(frozen=True)
class ProxyEvent:
    """One connection through the proxy. ``time``: epoch seconds of the decision;
    ``verdict``: ``"allowed"`` or ``"refused"``; ``reason``: a code of :data:`REASONS`;
    ``protocol``: ``"http"``, ``"connect"`` or ``"socks5"``; ``address``: the upstream
    address connected to (allowed) or refused (special_address), else ``""``."""

    time: float
    host: str
    port: int
    verdict: str
    reason: str
    protocol: str
    bytes_up: int = 0
    bytes_down: int = 0
    address: str = ""

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in
                ("time", "host", "port", "verdict", "reason", "protocol", "bytes_up", "bytes_down", "address")}

    def describe(self) -> str:
        """The one-line text of the logger and of ``--verbose``."""
        where = f"{self.host}:{self.port}" if ":" not in self.host else f"[{self.host}]:{self.port}"
        via = f" via {self.address}" if self.address and self.address != self.host else ""
        if self.verdict == ALLOWED:
            return (f"proxy allowed {self.protocol} {where}{via}: "
                    f"{self.bytes_up} bytes up, {self.bytes_down} bytes down")
        return f"proxy refused {self.protocol} {where}{via}: {self.reason} ({REASONS.get(self.reason, '')})"


def printable(text: str, limit: int = 255) -> str:
    """``text`` cut to ``limit`` characters, with every character that is not printable
    ASCII written as a ``\\xNN``/``\\uNNNN`` escape: a host name the client sent, fit for
    a log line (no newline, no terminal escape sequence reaches the launcher's log)."""
    text = text[:limit]
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if c.isascii() and c.isprintable() else ascii(c)[1:-1] for c in text)


class LogThrottle:
    """At most ``burst`` lines a second of each kind; the others are counted, and the
    count is handed back (to be logged as one line) when that kind's next second begins,
    or by :meth:`flush`. Thread-safe."""

    def __init__(self, burst: int):
        self.burst = burst
        self._lock = threading.Lock()
        self._kinds: dict[str, list] = {}   # kind -> [start of its second, logged in it, not logged since]

    def admit(self, kind: str, burst: int | None = None) -> tuple[bool, int]:
        """(log this line?, lines of ``kind`` not logged before it, to report now)."""
        now = time.monotonic()
        with self._lock:
            state = self._kinds.setdefault(kind, [-1e9, 0, 0])
            dropped = 0
            if now - state[0] >= 1.0:
                dropped, state[2] = state[2], 0
                state[0], state[1] = now, 0
            ok = state[1] < (self.burst if burst is None else burst)
            state[1 if ok else 2] += 1
        return ok, dropped

    def flush(self) -> dict[str, int]:
        """The lines of each kind not logged and not yet reported (then forgotten)."""
        with self._lock:
            out = {kind: state[2] for kind, state in self._kinds.items() if state[2]}
            for state in self._kinds.values():
                state[2] = 0
        return out


def deliver(event: ProxyEvent, on_event, log: bool = True, failed=None) -> None:
    """Log ``event`` (unless ``log`` is false) and hand it to ``on_event``; an exception
    of the callback is given to ``failed`` (default: logged), never raised (it runs on the
    proxy's thread)."""
    if log and event.verdict == REFUSED:
        logger.warning("%s", event.describe())
    elif log:
        logger.info("%s", event.describe())
    if on_event is not None:
        try:
            on_event(event)
        except Exception:   # noqa: BLE001 - the caller's bug must not stop the proxy
            if failed is None:
                logger.exception("proxy on_event callback failed")
            else:
                failed()
