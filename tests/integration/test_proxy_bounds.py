"""What a hostile client can make the proxy engine's process pay (pysandbox/proxy/server.py,
budget.py, handler.py): descriptors, log lines, time. The engine on 127.0.0.1, clients
on loopback, and the only upstream an echo server on 127.0.0.1 listed by address: no
network namespace needed, so these run as root and unprivileged alike. Every bound sits
beside its live control (the same client served below the bound, an active tunnel
outliving the idle timeout).

What a sandboxed command can do to its launcher through the same engine is
tests/integration/test_proxy_exhaustion.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pysandbox.proxy import budget
from pysandbox.proxy.rules import AllowList
from pysandbox.proxy.server import EgressProxy
from tests.support import loopback, wait_until
from tests.support.loopback import LoopbackServer


@pytest.fixture
def echo():
    e = LoopbackServer(loopback.echo)
    yield e
    e.close()


@contextlib.contextmanager
def engine(allow=(), **options):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    proxy = EgressProxy(listener, AllowList.from_strings(allow), resolver=lambda h, p: [], **options)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


def client(proxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.address[1]), timeout=20)


def read_all(s: socket.socket) -> bytes:
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def tunnel(proxy, target: str, extra: bytes = b"") -> tuple[socket.socket, bytes]:
    s = client(proxy)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + extra)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head


def refused_request(i: int = 0) -> bytes:
    return b"GET http://n%d.test/ HTTP/1.1\r\nHost: n%d.test\r\n\r\n" % (i, i)


# ---------------------------------------------------------------- the descriptor budget

def test_the_budget_is_the_smaller_of_the_cap_and_the_descriptor_limit():
    # In a child with a soft limit of 256: the formula of budget.py, and the explicit
    # cap when it is the smaller; the control is the same engine under the usual limit.
    script = textwrap.dedent('''
        import resource, socket, sys
        from pysandbox.proxy import budget
        from pysandbox.proxy.rules import AllowList
        from pysandbox.proxy.server import EgressProxy
        soft = int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        for cap in (1024, 10):
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
            with EgressProxy(s, AllowList.from_strings(())) if cap == 1024 else \\
                    EgressProxy(s, AllowList.from_strings(()), max_connections=cap) as p:
                pool = budget.POOL
                print(cap, p.budget, pool.soft, pool.reserve, pool.others)
    ''')
    for soft in (256, 1024):
        done = subprocess.run([sys.executable, "-c", script, str(soft)], capture_output=True, text=True,
                              timeout=60, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert done.returncode == 0, done.stderr
        rows = [list(map(int, line.split())) for line in done.stdout.splitlines()]
        for cap, got, seen_soft, reserve, others in rows:
            assert seen_soft == soft and reserve == max(64, soft // 4)
            assert 0 < others < 64
            assert got == min(cap, (soft - reserve - others) // 2), (soft, rows)
        assert rows[0][1] < 1024 and rows[1][1] == 10   # the limit decides, then the cap


def test_at_the_budget_the_proxy_spends_no_descriptor():
    # 5 connections fill the budget; 50 more wait in the backlog: this process's
    # descriptor table grows by the 50 client sockets only. Control: each of the first
    # 5 cost the proxy one descriptor (its accepted socket), and once they end, the
    # waiting clients are served.
    outer = len(os.listdir("/proc/self/fd"))
    with engine(max_connections=5, head_timeout=30) as proxy:
        base = len(os.listdir("/proc/self/fd"))
        held = [client(proxy) for _ in range(5)]
        assert wait_until(lambda: proxy.active == 5)
        assert len(os.listdir("/proc/self/fd")) == base + 10          # 5 ours + 5 accepted by the proxy
        waiting = [client(proxy) for _ in range(50)]
        for i, s in enumerate(waiting):
            s.sendall(refused_request(i))
        time.sleep(0.5)
        assert len(os.listdir("/proc/self/fd")) == base + 10 + 50     # not one more for the proxy
        assert proxy.active == 5 and budget.POOL.connections >= 5
        for s in held:
            s.close()
        answers = [read_all(s) for s in waiting]
        for s in waiting:
            s.close()
        assert all(a.startswith(b"HTTP/1.1 403") for a in answers)
        assert wait_until(lambda: proxy.active == 0)
    assert [e.reason for e in proxy.events].count("too_many_connections") == 1
    assert (budget.POOL.connections, budget.POOL.descriptors) == (0, 0)   # all given back to the pool
    assert wait_until(lambda: len(os.listdir("/proc/self/fd")) == outer)


FULL_TABLE = textwrap.dedent('''
    # A process that fills its own descriptor table while its proxy serves: accept()
    # fails with EMFILE. Prints the answers and the CPU time spent meanwhile; the test
    # counts the lines of the log (stderr).
    import logging, os, resource, socket, sys, time
    from pysandbox.proxy.rules import AllowList
    from pysandbox.proxy.server import EgressProxy
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="LOG %(message)s")
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
    proxy = EgressProxy(s, AllowList.from_strings(()), resolver=lambda h, p: [])
    proxy.start()
    clients = [socket.socket() for _ in range(3)]     # made first: connecting takes no descriptor
    fill = []
    while True:
        try:
            fill.append(os.dup(0))
        except OSError:
            break
    for i, c in enumerate(clients):
        c.settimeout(20)
        c.connect(proxy.address)
        c.sendall(b"GET http://n%d.test/ HTTP/1.1\\r\\nHost: n%d.test\\r\\n\\r\\n" % (i, i))
    busy0 = time.process_time()
    time.sleep(float(sys.argv[1]))
    busy = time.process_time() - busy0
    for fd in fill:
        os.close(fd)
    answers = [c.recv(100).split(b"\\r\\n")[0].decode() for c in clients]
    print("answers", answers, file=sys.stdout)
    print("cpu", round(busy, 3), file=sys.stdout)
    proxy.close()
''')


def test_accept_failing_with_emfile_pauses_and_logs_once_a_second():
    # The launcher at its descriptor limit: every accept() fails. asyncio's own server
    # logged a traceback per failure (1.2 million lines in 25 s); the engine pauses
    # accepting and logs one line a second, using almost no CPU. Control: once the
    # descriptors are free again, the clients that waited are served.
    done = subprocess.run([sys.executable, "-c", FULL_TABLE, "3"], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert out["answers"].count("HTTP/1.1 403 Forbidden") == 3, out
    lines = done.stderr.splitlines()
    accept_lines = [line for line in lines if "accept() failed" in line]
    assert 1 <= len(accept_lines) <= 5, lines
    assert "Too many open files" in accept_lines[0]
    assert "Traceback" not in done.stderr
    assert len(lines) <= 20, lines
    assert float(out["cpu"]) < 1.0, out


# ---------------------------------------------------------------- timeouts

def test_a_slowloris_is_closed_at_the_head_timeout(echo):
    # One byte every 0.1 s never completes the head: the bytes do not extend the
    # deadline; closed with 408 about head_timeout after the connect. Control: the same
    # head sent at once is served.
    target = f"127.0.0.1:{echo.port}"
    with engine((target,), head_timeout=1.0) as proxy:
        s = client(proxy)
        began = time.monotonic()
        answer = b""
        with contextlib.suppress(OSError):
            for byte in b"GET http://" + b"a" * 100:
                s.sendall(bytes([byte]))
                s.settimeout(0.1)
                try:
                    answer += s.recv(100)
                except TimeoutError:
                    continue
                if answer:
                    break
        took = time.monotonic() - began
        s.settimeout(5)
        answer += read_all(s)
        s.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert 0.9 <= took < 4, took
        t, head = tunnel(proxy, target)
        assert head.startswith(b"HTTP/1.1 200 ")
        t.sendall(b"ping")
        assert t.recv(4) == b"ping"
        t.close()
    assert [e.reason for e in proxy.events][:1] == ["timeout"]


def test_an_idle_tunnel_is_closed_and_an_active_one_is_not(echo):
    target = f"127.0.0.1:{echo.port}"
    with engine((target,), idle_timeout=1.0) as proxy:
        idle, head = tunnel(proxy, target)
        active, head2 = tunnel(proxy, target)
        assert head.startswith(b"HTTP/1.1 200 ") and head2.startswith(b"HTTP/1.1 200 ")
        idle.sendall(b"x")
        assert idle.recv(1) == b"x"
        began = time.monotonic()
        got = b""
        # control: a byte every 0.3 s for 3 s (three idle timeouts) keeps its tunnel
        for i in range(10):
            active.sendall(b"%d" % i)
            got += active.recv(1)
            time.sleep(0.3)
        assert got == b"0123456789"
        idle.settimeout(10)
        assert read_all(idle) == b""                            # closed by the proxy
        assert time.monotonic() - began < 5
        active.sendall(b"!")
        assert active.recv(1) == b"!"                           # still open
        idle.close()
        active.close()
        assert wait_until(lambda: proxy.counts["allowed"] == 2)


def test_timeouts_must_be_positive():
    s = socket.socket()
    try:
        for bad in ({"head_timeout": 0}, {"idle_timeout": -1}, {"idle_timeout": True}, {"max_connections": -1}):
            with pytest.raises(ValueError):
                EgressProxy(s, AllowList.from_strings(()), **bad)
    finally:
        s.close()


# ---------------------------------------------------------------- the log

def test_the_loops_exception_handler_and_failing_callbacks_are_throttled(caplog):
    # Whatever reaches the loop's exception handler, or the caller's failing on_event,
    # is logged at most once a second (asyncio's default handler: a traceback each).
    # Control: the first of each is logged, with its traceback.
    caplog.set_level(logging.INFO, logger="pysandbox.proxy")

    def broken(event):
        raise RuntimeError("callback bug")
    with engine(on_event=broken) as proxy:
        loop = proxy._loop
        for _ in range(500):
            loop.call_soon_threadsafe(lambda: 1 / 0)
        for i in range(30):
            with client(proxy) as s:
                s.sendall(refused_request(i))
                assert read_all(s).startswith(b"HTTP/1.1 403")
        assert wait_until(lambda: proxy.counts["refused"] == 30)
    records = [r for r in caplog.records if r.name == "pysandbox.proxy"]
    internal = [r for r in records if r.levelno == logging.ERROR and "ZeroDivisionError" in (r.exc_text or "")]
    callback = [r for r in records if "on_event callback failed" in r.getMessage()]
    assert 1 <= len(internal) <= 3 and 1 <= len(callback) <= 3, [r.getMessage() for r in records]
    assert internal[0].exc_info is not None and callback[0].exc_info is not None
    summaries = [r.getMessage() for r in records if "were not logged" in r.getMessage()]
    assert any("internal errors" in m for m in summaries), summaries
    assert len(records) <= 30 + 10


def test_a_hostile_host_name_reaches_the_log_escaped(caplog):
    # A SOCKS5 name and a CONNECT target carrying a newline and a terminal escape: the
    # event's host and the log line are one printable line. Control: a plain name is
    # logged as sent.
    caplog.set_level(logging.INFO, logger="pysandbox.proxy")
    evil = b"x\n\x1b[2Jpysandbox: all good\x7f"
    with engine() as proxy:
        with client(proxy) as s:
            s.sendall(b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(evil)]) + evil + b"\x01\xbb")
            read_all(s)
        with client(proxy) as s:
            s.sendall(b"CONNECT \x9b31mred.test:443 HTTP/1.1\r\n\r\n")      # C1 CSI: passes the head's check
            assert read_all(s).startswith(b"HTTP/1.1 400")
        with client(proxy) as s:
            s.sendall(b"CONNECT plain.test:443 HTTP/1.1\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 403")
        assert wait_until(lambda: proxy.counts["refused"] == 3)
    hosts = [e.host for e in proxy.events]
    assert hosts == ["x\\n\\x1b[2Jpysandbox: all good\\x7f", "\\x9b31mred.test", "plain.test"], hosts
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("proxy refused")]
    assert len(lines) == 3 and all(line.isprintable() and line.isascii() for line in lines), lines
    assert "plain.test:443" in lines[2]


# ---------------------------------------------------------------- requests that are not what they say

def test_bytes_after_the_connect_head_are_the_tunnels_first_bytes(echo):
    # A client that pipelines its first bytes after CONNECT (one send): they go through
    # the tunnel as they are, never read as a second request to decide. Control: what the
    # client sends once the tunnel is open goes the same way.
    target = f"127.0.0.1:{echo.port}"
    second = b"GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"
    with engine((target,)) as proxy:
        s, head = tunnel(proxy, target, extra=second)
        assert head.startswith(b"HTTP/1.1 200 ")
        s.settimeout(10)
        got = b""
        while len(got) < len(second):
            got += s.recv(100)
        assert got == second
        s.sendall(b"after")
        assert s.recv(5) == b"after"
        s.close()
        assert wait_until(lambda: proxy.counts["allowed"] == 1)
    assert [(e.host, e.reason) for e in proxy.events] == [("127.0.0.1", "ok")]


@pytest.mark.parametrize("target, reason", [
    ("user@127.0.0.1:{port}", "bad_request"),       # userinfo
    ("127.0.0.1:+{port}", "bad_request"),
    ("127.0.0.1:{port}:{port}", "bad_request"),
    ("127.0.0.1%25lo:{port}", "bad_request"),       # percent-encoding is not decoded
    ("[127.0.0.1]:{port}", "bad_request"),          # brackets hold IPv6 only
    ("[::1%25lo]:{port}", "bad_request"),           # no zone id
    ("127.1:{port}", "bad_request"),                # what a resolver reads as 127.0.0.1
    ("2130706433:{port}", "bad_request"),
    ("[::ffff:127.0.0.1]:{port}", "ip_literal_not_listed"),   # the listed address, spelt otherwise
    ("127.0.0.1:65536", "bad_request"),
    ("127.0.0.1:0{port}", "bad_request"),           # six digits (an ephemeral port has five)
    ("127.0.0.1:{port}", "ok"),                     # control
])
def test_odd_connect_targets(echo, target, reason):
    listed = f"127.0.0.1:{echo.port}"
    with engine((listed,)) as proxy:
        s, head = tunnel(proxy, target.format(port=echo.port))
        if reason == "ok":
            assert head.startswith(b"HTTP/1.1 200 "), head
            s.sendall(b"hi")
            assert s.recv(2) == b"hi"
        else:
            assert not head.startswith(b"HTTP/1.1 200 "), head
        s.close()
        assert wait_until(lambda: proxy.events)
    assert proxy.events[0].reason == reason, proxy.events


def test_a_tunnel_ends_when_its_client_goes_even_if_the_upstream_is_silent():
    # RFC 9110 9.3.6: once either side closed, the tunnel is closed. A client that went
    # away must not leave the proxy holding two descriptors until a silent upstream
    # ends or the idle timeout. Control: while the client stays, so does the tunnel.
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(4)
    target = f"127.0.0.1:{upstream.getsockname()[1]}"
    try:
        with engine((target,)) as proxy:
            s, head = tunnel(proxy, target)
            assert head.startswith(b"HTTP/1.1 200 ")
            server, _ = upstream.accept()
            time.sleep(1.0)
            assert proxy.active == 1                  # control: an idle tunnel with its client lives
            s.close()
            assert wait_until(lambda: proxy.active == 0, 5)
            server.settimeout(5)
            assert server.recv(10) == b""            # the proxy closed its side upstream
            server.close()
    finally:
        upstream.close()
