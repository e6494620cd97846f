"""The proxy's events: one record per connection, allowed or refused, with its byte
counts; the stable reason codes; the delivery to the caller and the logger.

A refused connection's event is emitted when it is refused; an allowed one's when the
connection ends, with the bytes relayed each way (``bytes_up``: client to upstream,
``bytes_down``: upstream to client); a connection closed before its first byte is
no event. Every event goes to the ``pysandbox.proxy`` logger
(refusals at WARNING, the rest at INFO) and to the caller's ``on_event``.
"""

from __future__ import annotations

import logging

from ..records import dataclass

__all__ = ["ALLOWED", "REFUSED", "REASONS", "ProxyEvent"]

logger = logging.getLogger("pysandbox.proxy")

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
    "too_many_connections": "the proxy's connection limit was reached",
    "unsupported_command": "a SOCKS5 command other than CONNECT",
    "closed": "the proxy was closed while the connection was being set up",
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


def deliver(event: ProxyEvent, on_event, log: bool = True) -> None:
    """Log ``event`` (unless ``log`` is false) and hand it to ``on_event``; an exception
    of the callback is logged, never raised (it runs on the proxy's thread)."""
    if log and event.verdict == REFUSED:
        logger.warning("%s", event.describe())
    elif log:
        logger.info("%s", event.describe())
    if on_event is not None:
        try:
            on_event(event)
        except Exception:   # noqa: BLE001 - the caller's bug must not stop the proxy
            logger.exception("proxy on_event callback failed")
