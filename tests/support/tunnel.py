"""A CONNECT tunnel through an HTTP proxy, standard library only: imported by the proxy
engine's tests, and run inside sandboxes as source text (:data:`SOURCE`) by the proxy
mode's."""

from __future__ import annotations

import inspect
import socket


def connect_tunnel(address, target, until=b"\r\n\r\n", step=4096, timeout=20, headers=""):
    """Ask the proxy at ``address`` for a tunnel to ``target`` (HOST:PORT); read until
    ``until`` (the end of the proxy's answer by default) or the end of the stream, in
    reads of ``step`` bytes (1: nothing past the answer is consumed). Returns the socket
    and what was read. ``headers``: more header lines (each ending in CRLF)."""
    s = socket.create_connection(address, timeout=timeout)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (target, target, headers)).encode())
    data = b""
    while until not in data:
        chunk = s.recv(step)
        if not chunk:
            break
        data += chunk
    return s, data


SOURCE = "import socket\n" + inspect.getsource(connect_tunnel)
