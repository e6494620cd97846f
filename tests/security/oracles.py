"""Live oracles for the security matrix: host-side listeners proven alive by a round trip,
and a runner for Python probe scripts inside a sandbox.

A listener answers ``PING <nonce>`` with ``PONG <nonce>``; everything else it
receives (a connection that sends anything else, or nothing) is recorded as
*foreign*. It handles connections one at a time in arrival order, so a round
trip completed after an attempt proves every earlier connection was seen.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid

import pysandbox
from tests.support import processes_with

PROBE_TIMEOUT = 60


class Listener:
    """A TCP or UDP listener on a loopback (or abstract / pathname Unix) address."""

    def __init__(self, family: int, kind: int, address):
        self.family, self.kind = family, kind
        self.sock = socket.socket(family, kind)
        if family != socket.AF_UNIX:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()
        self.foreign: list = []     # (peer, data) of everything that was not a PING
        self.pings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.address[1]

    def _serve(self):
        deadline = time.monotonic() + 600   # bounded even if a test forgets to close
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                if self.kind == socket.SOCK_STREAM:
                    conn, peer = self.sock.accept()
                    self._stream(conn, peer)
                else:
                    data, peer = self.sock.recvfrom(65536)
                    self._datagram(data, peer)
            except socket.timeout:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue

    def _stream(self, conn, peer):
        with conn:
            conn.settimeout(2.0)
            data = b""
            try:
                while not data.endswith(b"\n") and len(data) < 4096:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            if data.startswith(b"PING "):
                self.pings += 1
                try:
                    conn.sendall(b"PONG " + data[5:])
                except OSError:
                    pass
            else:
                self.foreign.append((peer, data))
                try:
                    conn.sendall(b"HOST-LISTENER\n")
                except OSError:
                    pass

    def _datagram(self, data, peer):
        if data.startswith(b"PING "):
            self.pings += 1
            self.sock.sendto(b"PONG " + data[5:], peer)
        else:
            self.foreign.append((peer, data))

    def round_trip(self) -> None:
        """Prove the listener alive from the host. Raises AssertionError if it is not."""
        nonce = uuid.uuid4().hex.encode()
        with socket.socket(self.family, self.kind) as c:
            c.settimeout(5.0)
            if self.kind == socket.SOCK_STREAM:
                c.connect(self.address)
                c.sendall(b"PING " + nonce + b"\n")
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
            else:
                if self.family == socket.AF_UNIX:
                    raise ValueError("unix datagram round trips are not used")
                c.sendto(b"PING " + nonce + b"\n", self.address)
                reply, _ = c.recvfrom(4096)
        assert reply == b"PONG " + nonce + b"\n", f"listener {self.address!r} is not alive: {reply!r}"

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def tcp4():
    return Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))


def udp4():
    return Listener(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))


def tcp6():
    return Listener(socket.AF_INET6, socket.SOCK_STREAM, ("::1", 0))


def udp6():
    return Listener(socket.AF_INET6, socket.SOCK_DGRAM, ("::1", 0))


def run_probe(script: str, policy, backend: str, args=(), **kwargs) -> dict:
    """Run a Python ``script`` in the sandbox; it prints one JSON object last on stdout.
    Returns that object plus ``_returncode`` and ``_stderr``."""
    done = pysandbox.run([sys.executable, "-I", "-c", script, *[str(a) for a in args]], policy=policy,
                         backend=backend, capture_output=True, timeout=PROBE_TIMEOUT, **kwargs)
    out = done.stdout.decode(errors="replace").strip().splitlines()
    assert out, f"probe printed nothing (rc {done.returncode}): {done.stderr.decode(errors='replace')}"
    result = json.loads(out[-1])
    result["_returncode"] = done.returncode
    result["_stderr"] = done.stderr.decode(errors="replace")
    return result


# Prelude shared by the in-sandbox probes: ``attempt(label, fn)`` records the errno.
PRELUDE = r'''
import errno, json, os, socket, sys
RESULTS = {}
def attempt(label, fn):
    try:
        value = fn()
        RESULTS[label] = {"ok": True, "errno": 0, "value": value}
    except OSError as exc:
        RESULTS[label] = {"ok": False, "errno": exc.errno,
                          "errname": errno.errorcode.get(exc.errno, str(exc.errno)), "syscall": CURRENT[0]}
CURRENT = ["?"]
def step(name):
    CURRENT[0] = name
def done():
    print(json.dumps(RESULTS))
'''


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    return [pid for pid, _ in processes_with(marker)]
