"""One client connection of the proxy, from its first byte to its event.

The first byte chooses the protocol (0x05: SOCKS5, else HTTP). Every phase has a
deadline: the client's whole request within ``head_timeout`` (a silent or slow client,
a slowloris, is dropped: ``timeout``), the resolution and each connection attempt
within theirs, and once relaying, a connection through which no byte went either way
for ``idle_timeout`` is closed. Every read is bounded (a head over 64 KiB is
``bad_request``), and the decision is the same for the
three protocols (:meth:`Connection.decide`): the host must match the allow list, a name
is resolved on the host by the proxy's resolver, every answer that is a special address
(pysandbox/proxy/addresses.py) must itself be listed, and the proxy connects to exactly
the addresses it checked, never resolving again. Through a tunnel (``CONNECT``, SOCKS5)
the client's first bytes are checked: a TLS ClientHello must name the requested host
(SNI), and on port 443 a name must be reached with TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

from . import httphead, sni
from .addresses import is_special, parse_address
from .events import ALLOWED, REFUSED, ProxyEvent, printable
from .rules import normalise_host, normalise_name

__all__ = ["Connection", "Refusal"]

# The most one read takes, and a stream's buffer (its socket pauses at twice this): about
# 200 KiB per connection at most, so max_connections bounds the launcher's memory (256 KiB
# each way would be a third faster in bulk, at 2.5 times the memory).
CHUNK = 65536
BUFFER = 65536
_HTTP_STATUS = {"bad_request": 400, "unsupported_command": 400, "timeout": 408, "resolve_failed": 502,
                "connect_failed": 502, "too_many_connections": 503, "proxy_auth_required": 407}
_SOCKS_CODE = {"resolve_failed": 0x04, "connect_failed": 0x05, "bad_request": 0x01, "timeout": 0x06,
               "unsupported_command": 0x07, "bad_address_type": 0x08, "closed": 0x01}
_SOCKS_OK = b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00"


class Refusal(Exception):
    """A connection refused: ``reason`` (a code of events.REASONS), ``detail`` (the
    text of the reply), ``address`` (the upstream address concerned, if any)."""

    def __init__(self, reason: str, detail: str = "", address: str = "", socks_code: int | None = None):
        super().__init__(detail or reason)
        self.reason, self.detail, self.address, self.socks_code = reason, detail, address, socks_code


class Connection:
    """The state of one client connection; :meth:`run` is its whole life."""

    def __init__(self, proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.proxy, self.reader, self.writer = proxy, reader, writer
        self.protocol, self.host, self.port, self.address = "http", "", 0, ""
        self.bytes_up = self.bytes_down = 0
        self.upstream: asyncio.StreamWriter | None = None
        self.up_reader: asyncio.StreamReader | None = None
        self.literal = False
        self.replied = False      # the client got its protocol's answer (200, SOCKS reply)
        self.greeted = False      # SOCKS5: the method was chosen, a request reply may follow
        self.verdict: tuple[str, str] | None = None
        self.emitted = False
        self._idle = None         # the relay's deadline (asyncio.Timeout), moved on by every byte
        self.tenant = None        # a session's command this connection is attributed to (proxy/tenants.py)

    # ---------------------------------------------------------------- life

    async def run(self) -> None:
        try:
            await self._serve()
        except Refusal as refusal:
            self._refused(refusal)
            self._emit()             # before the answer: a client that has it finds the event
            await self._answer_refusal(refusal)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            # the client or the upstream went away: once connected, the event says what
            # was relayed; before, the request was never complete
            if self.upstream is None:
                self._refused(Refusal("bad_request", "the client closed before its request was complete"))
        except asyncio.CancelledError:
            if self.verdict is None and self.upstream is None:
                self._refused(Refusal("closed", "the proxy closed"))
            raise
        finally:
            # the event first: a client that saw its connection close finds it recorded
            if self.verdict is None and self.upstream is not None:
                self.verdict = (ALLOWED, "ok")
            self._emit()
            if self.tenant is not None:
                self.proxy.tenants.release(self.tenant, asyncio.current_task())
            for w in (self.upstream, self.writer):
                if w is not None:
                    w.close()
            if self.upstream is not None:
                self.proxy.descriptors(-1)

    def _refused(self, refusal: Refusal) -> None:
        if self.verdict is None:
            self.verdict = (REFUSED, refusal.reason)
            if refusal.address:
                self.address = refusal.address

    def _emit(self) -> None:
        """Record the connection's event, once, if it has a verdict."""
        if self.verdict is None or self.emitted:
            return
        self.emitted = True
        verdict, reason = self.verdict
        self.proxy._record(ProxyEvent(time=time.time(), host=self.host, port=self.port, verdict=verdict,
                                      reason=reason, protocol=self.protocol, bytes_up=self.bytes_up,
                                      bytes_down=self.bytes_down, address=self.address), tenant=self.tenant)

    async def _answer_refusal(self, refusal: Refusal) -> None:
        if self.replied or self.writer.is_closing() or refusal.reason == "closed":
            return
        if self.protocol == "socks5":
            if not self.greeted:
                return
            code = refusal.socks_code or _SOCKS_CODE.get(refusal.reason, 0x02)
            self.writer.write(bytes((0x05, code)) + _SOCKS_OK[2:])
        else:
            where = f"{self.host}:{self.port}" if self.host else "request"
            text = f"pysandbox proxy: refused {where}: {refusal.detail or refusal.reason} ({refusal.reason})"
            self.writer.write(httphead.reply(_HTTP_STATUS.get(refusal.reason, 403), text))
        try:
            await asyncio.wait_for(self.writer.drain(), 5)
        except (OSError, asyncio.TimeoutError):
            pass

    async def _serve(self) -> None:
        timeout = self.proxy.head_timeout
        try:
            async with asyncio.timeout(timeout):
                first = await self.reader.read(1)
                if not first:
                    return        # closed without a request: nothing to decide
                if first == b"\x05":
                    self.protocol = "socks5"
                    request = None
                    host, port = await self._socks_request()
                else:
                    request = await self._http_request(first)
                    host, port = request.host, request.port
                    self.host, self.port = printable(host), port
                    self._admit(httphead.basic_credential(request.headers))
        except TimeoutError:
            raise Refusal("timeout", f"no complete request within {timeout:g} s") from None
        await self.decide(host, port)      # bounded by resolve_timeout and connect_timeout
        async with asyncio.timeout(self.proxy.idle_timeout) as self._idle:
            await self._reply(request)
            await self._relay(tunnel=self.protocol != "http")

    def _active(self) -> None:
        """A byte went through: the idle deadline starts again."""
        self._idle.reschedule(asyncio.get_running_loop().time() + self.proxy.idle_timeout)

    async def _reply(self, request) -> None:
        """The protocol's answer once connected: ``200`` to ``CONNECT``, the SOCKS5
        success, or the forwarded request's head to its origin server."""
        if request is None:
            self.replied = True
            self.writer.write(_SOCKS_OK)
            await self.writer.drain()
        elif request.is_connect:
            self.replied = True
            self.writer.write(httphead.reply(200))
            await self.writer.drain()
        else:
            head = request.forward_head()
            self.upstream.write(head)
            self.bytes_up += len(head)
            await self.upstream.drain()

    # ---------------------------------------------------------------- protocols

    async def _http_request(self, first: bytes) -> httphead.Request:
        try:
            rest = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise Refusal("bad_request", f"request head over {httphead.MAX_HEAD} bytes") from None
        except asyncio.IncompleteReadError:
            raise Refusal("bad_request", "the request head ended early") from None
        try:
            request = httphead.parse_request(first + rest)
        except httphead.BadRequest as exc:
            raise Refusal("bad_request", str(exc)) from None
        self.protocol = "connect" if request.is_connect else "http"
        return request

    async def _socks_request(self) -> tuple[str, int]:
        methods = await self.reader.readexactly((await self.reader.readexactly(1))[0])
        method = 0x00 if self.proxy.tenants is None else 0x02   # a session's: user/password (RFC 1929)
        if method not in methods:
            self.writer.write(b"\x05\xff")
            self.replied = True
            if method == 0x02:
                raise Refusal("proxy_auth_required", "no user/password offered")
            raise Refusal("bad_request", "no acceptable SOCKS5 method (only no-auth)")
        self.writer.write(bytes((0x05, method)))
        await self.writer.drain()
        if method == 0x02:
            await self._socks_auth()
        self.greeted = True
        ver, cmd, _, atyp = await self.reader.readexactly(4)
        if ver != 5:
            raise Refusal("bad_request", "not a SOCKS5 request", socks_code=0x01)
        if atyp == 0x01:
            host = socket.inet_ntop(socket.AF_INET, await self.reader.readexactly(4))
        elif atyp == 0x04:
            host = socket.inet_ntop(socket.AF_INET6, await self.reader.readexactly(16))
        elif atyp == 0x03:
            raw = await self.reader.readexactly((await self.reader.readexactly(1))[0])
            try:
                host = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise Refusal("bad_request", "undecodable name", socks_code=0x01) from None
        else:
            raise Refusal("bad_request", f"address type {atyp}", socks_code=0x08)
        port = int.from_bytes(await self.reader.readexactly(2), "big")
        self.host, self.port = printable(host), port
        if cmd != 0x01:
            raise Refusal("unsupported_command", f"SOCKS5 command {cmd}", socks_code=0x07)
        return host, port

    async def _socks_auth(self) -> None:
        """RFC 1929: the user/password sub-negotiation, then its status."""
        if (await self.reader.readexactly(1)) != b"\x01":
            self.replied = True
            raise Refusal("bad_request", "not a SOCKS5 user/password request")
        user = await self.reader.readexactly((await self.reader.readexactly(1))[0])
        password = await self.reader.readexactly((await self.reader.readexactly(1))[0])
        try:
            credential = (user.decode("utf-8"), password.decode("utf-8"))
        except UnicodeDecodeError:
            credential = None
        try:
            self._admit(credential)
        except Refusal:
            self.writer.write(b"\x01\x01")
            self.replied = True
            raise
        self.writer.write(b"\x01\x00")

    def _admit(self, credential) -> None:
        """A session's proxy (``proxy.tenants``): attribute this connection to the command
        whose live ``(user, password)`` it gave, or refuse it (recorded on the session)."""
        tenants = self.proxy.tenants
        if tenants is None:
            return
        if credential is not None:
            self.tenant = tenants.admit(*credential, asyncio.current_task())
        if self.tenant is None:
            raise Refusal("proxy_auth_required", "this session's proxy needs the credential of a running command "
                          "(its proxy variables)", socks_code=0x02)

    # ---------------------------------------------------------------- the decision

    async def decide(self, host: str, port: int) -> None:
        """Check ``host:port`` and connect to it (``self.upstream``), or raise Refusal."""
        norm = normalise_host(host)
        self.host, self.port = (norm[0] if norm else printable(host)), port
        if norm is None:
            raise Refusal("bad_request", "not a valid host name or address", socks_code=0x01)
        name, literal = norm
        # a session's command: its own list too (narrower than the session's, tenants.narrowed)
        lists = (self.proxy.allow,) if self.tenant is None else (self.proxy.allow, self.tenant.allow)
        if any(allow.match(name, port) is None for allow in lists):
            if literal is not None:
                raise Refusal("ip_literal_not_listed", "this IP address is not on the allow list",
                              socks_code=0x02)
            raise Refusal("not_allowed", "not on the allow list", socks_code=0x02)
        if literal is not None:
            self.literal, addresses = True, [literal]
        else:
            addresses = await self._resolve(name, port)
            for addr in addresses:
                if is_special(addr) and not all(allow.lists_address(addr, port) for allow in lists):
                    raise Refusal("special_address", f"resolves to {addr}, a special address not on the allow list",
                                  address=str(addr), socks_code=0x02)
        await self._connect(addresses, port)

    async def _resolve(self, name: str, port: int) -> list:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.proxy.resolve_timeout):
                answers = await loop.run_in_executor(None, self.proxy.resolver, name, port)
        except (TimeoutError, OSError, UnicodeError, ValueError) as exc:
            raise Refusal("resolve_failed", f"cannot resolve: {exc or 'timed out'}") from None
        out = []
        for text in answers or ():
            addr = parse_address(text)
            if addr is not None and addr not in out:
                out.append(addr)
        if not out:
            raise Refusal("resolve_failed", "the name has no address")
        return out

    async def _connect(self, addresses: list, port: int) -> None:
        loop = asyncio.get_running_loop()
        last = None
        for addr in addresses:
            family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            except OSError as exc:   # EMFILE: the launcher is short of descriptors
                last = exc
                continue
            self.proxy.descriptors(1)
            try:
                sock.setblocking(False)
                async with asyncio.timeout(self.proxy.connect_timeout):
                    await loop.sock_connect(sock, (str(addr), port))
                self.up_reader, self.upstream = await asyncio.open_connection(sock=sock, limit=BUFFER)
                self.address = str(addr)
                return
            except (OSError, TimeoutError) as exc:
                sock.close()
                self.proxy.descriptors(-1)
                last = exc
            except BaseException:
                sock.close()
                self.proxy.descriptors(-1)
                raise
        code = 0x04 if isinstance(last, TimeoutError) or getattr(last, "errno", None) in (113, 101) else 0x05
        raise Refusal("connect_failed", f"cannot connect: {last or 'timed out'}", socks_code=code)

    # ---------------------------------------------------------------- relaying

    async def _relay(self, tunnel: bool) -> None:
        """Relay both ways. A tunnel ends when either side closed, once what that side
        sent was passed on (RFC 9110 9.3.6: a tunnel whose client went away must not hold
        the launcher's two descriptors until a silent upstream ends); a forwarded request
        when the origin server closes (it was asked to: ``Connection: close``)."""
        up = asyncio.create_task(self._pump_up(first_check=tunnel))
        down = asyncio.create_task(self._pump_down())
        try:
            if tunnel:
                done, _ = await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()        # a Refusal of the first bytes' check
            else:
                await down
        finally:
            for task in (up, down):
                if not task.done():
                    task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def _pump_down(self) -> None:
        await self._copy(self.up_reader, self.writer, "bytes_down")

    async def _pump_up(self, first_check: bool) -> None:
        try:
            first = await self._check_first_bytes() if first_check else b""
        except OSError:
            return
        await self._copy(self.reader, self.upstream, "bytes_up", first or b"", more=first is not None)

    async def _copy(self, reader, writer, counter: str, first: bytes = b"", more: bool = True) -> None:
        """``first``, then (with ``more``) what ``reader`` gives until EOF, to ``writer``,
        counted in ``counter``; then EOF to ``writer`` (a half-close)."""
        data = first
        try:
            while True:
                if data:
                    self._active()
                    writer.write(data)
                    setattr(self, counter, getattr(self, counter) + len(data))
                    await writer.drain()
                if not more or not (data := await reader.read(CHUNK)):
                    break
        except OSError:
            return
        if writer.can_write_eof() and not writer.is_closing():
            with contextlib.suppress(OSError):
                writer.write_eof()

    async def _check_first_bytes(self) -> bytes | None:
        """The client's first bytes through a tunnel, once checked (None: it sent none);
        Refusal when a ClientHello names another host, or none on port 443."""
        must_tls = self.port == 443 and not self.literal
        limit = self.proxy.head_timeout
        try:
            if must_tls:
                async with asyncio.timeout(limit):
                    data = await self.reader.read(CHUNK)
            else:
                data = await self.reader.read(CHUNK)
            if not data:
                return None
            if not sni.looks_like_tls(data):
                if must_tls:
                    raise Refusal("not_tls", "port 443 of a name is reached with TLS only", address=self.address)
                return data
            async with asyncio.timeout(limit):
                self._active()
                parser = sni.HelloReader()      # each byte parsed once, however the client cuts them
                hello = parser.feed(data)
                buf = bytearray(data)
                while hello.status == sni.NEED_MORE:
                    more = await self.reader.read(CHUNK)
                    if not more:
                        return None
                    buf += more
                    hello = parser.feed(more)
                data = bytes(buf)
        except TimeoutError:
            raise Refusal("timeout", "no TLS ClientHello in time", address=self.address) from None
        if self.literal:
            return data     # a listed address: whatever name the client gives
        if hello.status != sni.OK:
            raise Refusal("sni_missing" if hello.status == sni.NOT_TLS else "bad_request",
                          "not a readable TLS ClientHello", address=self.address)
        if hello.sni is None:
            raise Refusal("sni_missing", "the TLS ClientHello names no server", address=self.address)
        if normalise_name(hello.sni) != self.host:
            raise Refusal("sni_mismatch", f"the TLS ClientHello names {printable(hello.sni)!r}", address=self.address)
        return data
