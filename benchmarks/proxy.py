"""run.py's ``proxy`` section: what the egress proxy (pysandbox/proxy/server.py) adds to
a request, against the same request made directly, alternated round by round.

An HTTP server on 127.0.0.1 answers ``GET /small`` (a few bytes) and ``GET /big``
(``proxy_big_mib`` MiB); each contender opens a fresh TCP connection, sends one request
and reads to EOF: ``direct`` (to the server), ``proxy http`` (absolute-form through the
proxy), ``proxy connect`` (CONNECT, then the request in the tunnel), ``proxy socks5``
(remote name). The proxy resolves ``bench.test`` with a hook to 127.0.0.1, which the
allow list lists (a loopback address must be). Reported: medians, p90, and each
proxied median over the direct one, from this run.
"""

from __future__ import annotations

import http.server
import socket
import threading

import measure as M
from measure import Summary, ms, ratio
from sessions import Call

NAME = "bench.test"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    big = b""

    def do_GET(self):
        body = self.big if self.path == "/big" else b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _read_all(s: socket.socket) -> int:
    n = 0
    while chunk := s.recv(262144):
        n += len(chunk)
    return n


def _request(path: str, port: int) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {NAME}:{port}\r\nConnection: close\r\n\r\n".encode()


def _head(s: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("proxy closed the tunnel")
        data += chunk


def _contenders(proxy_port: int, port: int, path: str) -> list:
    def direct():
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(_request(path, port))
            return _read_all(s)

    def via_http():
        with socket.create_connection(("127.0.0.1", proxy_port)) as s:
            s.sendall(f"GET http://{NAME}:{port}{path} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n".encode())
            return _read_all(s)

    def via_connect():
        with socket.create_connection(("127.0.0.1", proxy_port)) as s:
            s.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n".encode())
            _head(s)
            s.sendall(_request(path, port))
            return _read_all(s)

    def via_socks():
        with socket.create_connection(("127.0.0.1", proxy_port)) as s:
            s.sendall(b"\x05\x01\x00")
            s.recv(2)
            s.sendall(b"\x05\x01\x00\x03" + bytes([len(NAME)]) + NAME.encode() + port.to_bytes(2, "big"))
            reply = s.recv(10)
            if reply[:2] != b"\x05\x00":
                raise ConnectionError(f"SOCKS5 reply {reply!r}")
            s.sendall(_request(path, port))
            return _read_all(s)
    return [Call("direct", direct), Call("proxy http", via_http), Call("proxy connect", via_connect),
            Call("proxy socks5", via_socks)]


def section_proxy(report, cfg: dict, deadline: float) -> None:
    from pysandbox.proxy.rules import AllowList
    from pysandbox.proxy.server import EgressProxy

    rounds, big_mib = cfg["proxy_rounds"], cfg["proxy_big_mib"]
    _Handler.big = b"x" * (big_mib << 20)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    proxy = EgressProxy(listener, AllowList.from_strings([f"{NAME}:{port}", f"127.0.0.1:{port}"]),
                        resolver=lambda host, p: ["127.0.0.1"])
    proxy.start()
    report.out(f"## Egress proxy: one request per connection, direct and through the proxy "
               f"({rounds} rounds, alternated; upstream on loopback)")
    report.out()
    results = {}
    try:
        for path, n in (("/small", rounds), ("/big", max(3, rounds // 10))):
            samples = M.alternate(_contenders(proxy.address[1], port, path), n, warmup=2, deadline=deadline)
            stats = {k: Summary.of(v) for k, v in samples.items()}
            results[path] = {k: vars(v) for k, v in stats.items()}
            base = stats["direct"].median
            what = "a few bytes" if path == "/small" else f"{big_mib} MiB"
            report.table([f"GET {path} ({what})", "median ms", "p90 ms", "median / direct", "added ms (median)", "n"],
                         [[k, ms(s.median), ms(s.p90), ratio(s.median, base), ms(s.median - base), s.n]
                          for k, s in stats.items()])
    finally:
        proxy.close()
        server.shutdown()
        server.server_close()
    counts = proxy.counts
    report.out(f"proxy events: {counts['allowed']} allowed, {counts['refused']} refused")
    report.out()
    if counts["refused"]:
        raise RuntimeError(f"the proxy refused {counts['refused']} benchmark connections")
    report.results["proxy"] = results
