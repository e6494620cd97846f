"""The upstream test servers of the proxy tests: ``python -m tests.support.upstream``.

Run inside a network namespace the test made (tests/support/proxylab.py), it serves
HTTP on every ``--http PORT`` and HTTPS on every ``--https PORT`` (the certificate and
key given), on all addresses of that namespace, one thread per connection. ``GET
/echo...`` answers ``upstream <scheme> host=<Host header> path=<path>`` (the tests
read which name and path arrived); other paths are files under ``--root`` (a tiny
package index or a git tree of a test). It prints ``ready`` once every port listens.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import socket
import ssl
import sys
import threading


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    scheme = "http"

    def do_GET(self):
        if self.path.startswith("/echo"):
            body = f"upstream {self.scheme} host={self.headers.get('Host')} path={self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    """Dual-stack where the namespace has IPv6 (``::`` with IPV6_V6ONLY off), else IPv4."""

    request_queue_size = 1024
    daemon_threads = True
    address_family = socket.AF_INET6 if os.path.exists("/proc/net/if_inet6") else socket.AF_INET

    def server_bind(self):
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def serve(port: int, root: str, context: ssl.SSLContext | None) -> Server:
    handler = type("TLSHandler" if context else "PlainHandler", (Handler,),
                   {"scheme": "https" if context else "http"})
    server = Server(("", port), functools.partial(handler, directory=root))
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, action="append", default=[])
    parser.add_argument("--https", type=int, action="append", default=[])
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--root", default=".")
    args = parser.parse_args(argv)
    context = None
    if args.https:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
    for port in args.http:
        serve(port, args.root, None)
    for port in args.https:
        serve(port, args.root, context)
    print("ready", flush=True)
    sys.stdin.read()     # ends when the test closes our stdin (or kills us by pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
