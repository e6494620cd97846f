"""The server name (SNI) of a TLS ClientHello, read from the first bytes a client sends.

Pure and bounded: ``parse_client_hello(data)`` looks at the bytes received so far and
answers ``NEED_MORE`` (a prefix of a ClientHello: read more), ``NOT_TLS`` (the first
bytes are not a TLS handshake record), ``MALFORMED`` (a TLS handshake that is not a
well-formed ClientHello, or one larger than :data:`MAX_HELLO`), or ``OK`` with the name
(None when the ClientHello has no server_name extension). The ClientHello may span
several records (RFC 8446 5.1), each arriving in any number of reads; every length is
checked against what contains it. :class:`HelloReader` answers the same as bytes
arrive (``feed``), taking each byte once: the proxy's thread does linear work for a
ClientHello however it is cut (parsing all it got again on each read cost about 4 ms a
read for 60 KB in one-byte records: minutes for a client sending a byte at a time).
"""

from __future__ import annotations

__all__ = ["MALFORMED", "MAX_HELLO", "NEED_MORE", "NOT_TLS", "OK", "Hello", "HelloReader", "parse_client_hello"]

NEED_MORE = "need_more"
NOT_TLS = "not_tls"
MALFORMED = "malformed"
OK = "ok"

MAX_HELLO = 64 * 1024          # a ClientHello with post-quantum key shares is ~2 KiB
_MAX_RECORD = 16384 + 256       # TLSPlaintext.length limit (RFC 8446 5.1), with slack
_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_EXT_SERVER_NAME = 0x0000


class Hello:
    __slots__ = ("status", "sni")

    def __init__(self, status: str, sni: str | None = None):
        self.status, self.sni = status, sni

    def __repr__(self) -> str:
        return f"Hello({self.status!r}, sni={self.sni!r})"


def looks_like_tls(data: bytes) -> bool:
    """Do the first bytes (at least one) start a TLS handshake record?"""
    return len(data) >= 1 and data[0] == _HANDSHAKE and (len(data) < 2 or data[1] == 0x03)


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int, end: int):
        self.buf, self.pos, self.end = buf, pos, end

    def take(self, n: int):
        if n < 0 or self.pos + n > self.end:
            raise ValueError("truncated")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, len_bytes: int) -> "_Reader":
        n = self.uint(len_bytes)
        start = self.pos
        self.take(n)
        return _Reader(self.buf, start, start + n)

    def done(self) -> bool:
        return self.pos == self.end


def _server_name(ext: _Reader) -> str | None:
    names = ext.vector(2)
    if not ext.done():
        raise ValueError("trailing bytes after server_name_list")
    found = None
    while not names.done():
        kind = names.uint(1)
        name = names.vector(2)
        raw = bytes(name.take(name.end - name.pos))
        if kind != 0:
            continue
        if found is not None or not raw or not raw.isascii() or any(b <= 0x20 or b == 0x7F for b in raw):
            raise ValueError("bad or repeated host_name")
        found = raw.decode("ascii")
    if found is None:
        raise ValueError("server_name without a host_name")
    return found


class HelloReader:
    """The answer of :func:`parse_client_hello` for all the bytes fed so far, each byte
    looked at once: complete records are taken off as they arrive, and the ClientHello
    is parsed once, when its last byte came. After an answer other than ``NEED_MORE``,
    further bytes change nothing."""

    __slots__ = ("_tail", "_body", "_seen", "_answer")

    def __init__(self):
        self._tail = bytearray()    # the start of a record not complete yet
        self._body = bytearray()    # the handshake bytes of the complete records
        self._seen = 0              # bytes fed
        self._answer: Hello | None = None

    def feed(self, data: bytes) -> Hello:
        if self._answer is not None:
            return self._answer
        if self._seen < 2 and data and not looks_like_tls(bytes(self._tail) + data[:2]):
            return self._end(Hello(NOT_TLS))
        self._seen += len(data)
        if self._seen > MAX_HELLO + 5 * (MAX_HELLO // 256 + 1):
            return self._end(Hello(MALFORMED))
        tail = self._tail
        tail += data
        pos = 0
        while len(tail) - pos >= 5:
            ctype, major, length = tail[pos], tail[pos + 1], int.from_bytes(tail[pos + 3:pos + 5], "big")
            if ctype != _HANDSHAKE or major != 0x03 or length == 0 or length > _MAX_RECORD:
                return self._end(Hello(MALFORMED))
            if len(tail) - pos < 5 + length:
                break
            body = self._body
            body += tail[pos + 5:pos + 5 + length]
            pos += 5 + length
            if body[0] != _CLIENT_HELLO or (len(body) >= 4 and int.from_bytes(body[1:4], "big") > MAX_HELLO):
                return self._end(Hello(MALFORMED))
            if len(body) >= 4 and len(body) >= 4 + int.from_bytes(body[1:4], "big"):
                return self._end(_parse_hello(body))
        del tail[:pos]
        return Hello(NEED_MORE)

    def _end(self, answer: Hello) -> Hello:
        self._answer = answer
        self._tail = self._body = bytearray()
        return answer


def parse_client_hello(data: bytes) -> Hello:
    """See the module's docstring. Never raises for any ``data``."""
    if not data:
        return Hello(NEED_MORE)
    return HelloReader().feed(data)


def _parse_hello(body: bytearray) -> Hello:
    """The ClientHello handshake message ``body`` (complete): ``OK`` or ``MALFORMED``."""
    length = int.from_bytes(body[1:4], "big")
    try:
        hello = _Reader(body, 4, 4 + length)
        hello.take(2 + 32)            # legacy_version, random
        session_id = hello.vector(1)
        if session_id.end - session_id.pos > 32:
            raise ValueError("session id longer than 32 bytes")
        hello.vector(2)               # cipher_suites
        hello.vector(1)               # legacy_compression_methods
        if hello.done():
            return Hello(OK, None)    # no extensions at all
        exts = hello.vector(2)
        if not hello.done():
            raise ValueError("trailing bytes after extensions")
        sni, seen = None, set()
        while not exts.done():
            kind = exts.uint(2)
            ext = exts.vector(2)
            if kind in seen:
                raise ValueError("repeated extension")
            seen.add(kind)
            if kind == _EXT_SERVER_NAME:
                sni = _server_name(ext)
        return Hello(OK, sni)
    except ValueError:
        return Hello(MALFORMED)
