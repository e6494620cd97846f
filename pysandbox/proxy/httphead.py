"""The proxy's HTTP/1.x side, pure: parse a request head (absolute-form or ``CONNECT``),
rewrite an absolute-form request for its origin server, and format the proxy's own
replies.

Forwarded requests go out in origin-form (``GET /path?q HTTP/1.1``) with ``Host`` set
to the requested authority, the hop-by-hop headers (``Connection`` and every header it
names, ``Keep-Alive``, ``Proxy-Connection``, ``Proxy-Authorization``, ``TE``,
``Trailer``, ``Upgrade``) removed and ``Connection: close``: one request per client
connection, so every request is decided on its own.
"""

from __future__ import annotations

from .rules import parse_port, split_host_port

__all__ = ["MAX_HEAD", "BadRequest", "Request", "basic_credential", "parse_request", "reply"]

MAX_HEAD = 64 * 1024
MAX_HEADERS = 200
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                  "proxy-authenticate", "te", "trailer", "upgrade"})
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class BadRequest(ValueError):
    """The head is not a request this proxy relays; the message says why."""


class Request:
    """A parsed request head. ``host`` keeps the brackets of an IPv6 literal."""

    __slots__ = ("method", "target", "version", "headers", "host", "port", "path")

    def __init__(self, method, target, version, headers, host, port, path):
        self.method, self.target, self.version, self.headers = method, target, version, headers
        self.host, self.port, self.path = host, port, path

    @property
    def is_connect(self) -> bool:
        return self.method == "CONNECT"

    def forward_head(self) -> bytes:
        """The head to send to the origin server (absolute-form requests only)."""
        named: set[str] = set()
        for name, value in self.headers:
            if name.lower() == "connection":
                named.update(t.strip().lower() for t in value.split(","))
        authority = self.host if self.port == 80 else f"{self.host}:{self.port}"
        lines = [f"{self.method} {self.path} {self.version}", f"Host: {authority}"]
        for name, value in self.headers:
            low = name.lower()
            if low in _HOP or low in named or low == "host":
                continue
            lines.append(f"{name}: {value}")
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def basic_credential(headers) -> tuple[str, str] | None:
    """``(user, password)`` of the request's ``Proxy-Authorization: Basic``, or None."""
    import base64
    import binascii
    for name, value in headers:
        scheme, _, token = value.partition(" ")
        if name.lower() != "proxy-authorization" or scheme.lower() != "basic":
            continue
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return (user, password) if sep else None
    return None


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    if not text or "@" in text:
        raise BadRequest("the authority is empty or carries user information")
    host, port_text = split_host_port(text)
    if host in ("", "[]"):
        raise BadRequest("the authority names no host")
    if port_text is None:
        if default_port is None:
            raise BadRequest("CONNECT needs host:port")
        return host, default_port
    port = parse_port(port_text)
    if port is None:
        raise BadRequest(f"bad port {port_text!r}")
    return host, port


def parse_request(head: bytes) -> Request:
    """Parse a complete head (up to and including the blank line).

    Raises:
        BadRequest: not HTTP/1.x, not absolute-form ``http://`` nor ``CONNECT host:port``,
            a malformed header line, or too many headers.
    """
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:   # pragma: no cover - latin-1 decodes every byte
        raise BadRequest("undecodable head") from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequest("the request line is not METHOD TARGET VERSION")
    method, target, version = parts
    if not method or not all(ord(c) in _TOKEN for c in method):
        raise BadRequest("bad method")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(f"unsupported version {version[:20]!r}")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in target):
        # a bare LF or a control character in the authority would reach the forwarded
        # Host line (the decision refuses such a host today; the parser must not rely on it)
        raise BadRequest("control character in the request target")
    headers = []
    for line in lines[1:]:
        if line == "":
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or not all(ord(c) in _TOKEN for c in name):
            raise BadRequest("malformed header line")
        if any(c in value for c in "\r\n\0"):
            raise BadRequest("control character in a header value")
        headers.append((name, value.strip(" \t")))
        if len(headers) > MAX_HEADERS:
            raise BadRequest("too many header lines")
    if method == "CONNECT":
        host, port = _authority(target, None)
        return Request(method, target, version, headers, host, port, "")
    if not target[:7].lower() == "http://":
        raise BadRequest("only absolute-form http:// requests and CONNECT are proxied")
    rest = target[7:]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    host, port = _authority(authority, 80)
    return Request(method, target, version, headers, host, port, path)


_STATUS = {200: "Connection established", 400: "Bad Request", 403: "Forbidden",
           407: "Proxy Authentication Required",
           408: "Request Timeout", 502: "Bad Gateway", 503: "Service Unavailable"}


def reply(status: int, body: str = "") -> bytes:
    """The proxy's own response; the body is one line of text (refusals say why)."""
    data = (body + "\n").encode("utf-8", "replace") if body else b""
    head = f"HTTP/1.1 {status} {_STATUS[status]}\r\n"
    if status != 200:
        head += (f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
                 "Connection: close\r\nX-Pysandbox-Proxy: refused\r\n")
    if status == 407:
        head += 'Proxy-Authenticate: Basic realm="pysandbox"\r\n'
    return (head + "\r\n").encode("latin-1") + data
