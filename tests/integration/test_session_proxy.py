"""Network proxy mode in sessions, pools and asyncio sessions (pysandbox/session_proxy.py),
on both backends: one engine per session, each command's connections attributed to it
by its own credential, allow lists that narrow and never widen, credentials and tunnels
that end with their command, nothing left once the session is closed.

Traffic goes only to loopback: the sandbox's own (the proxy's listener) and echo
servers the tests open on the host's 127.0.0.1, listed by address. Every refusal has a
live control: the same request with the right credential (or from the command it
belongs to, or while that command runs) is served.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

import pysandbox
from pysandbox import aio
from pysandbox.errors import PolicyError, Reason
from tests.support import loopback, need, python_in_sandbox, tunnel
from tests.support.loopback import LoopbackServer

pytestmark = pytest.mark.requires("userns")

# A CONNECT through the proxy, with the credential of the proxy URL argv[2] ("env": the
# command's own HTTPS_PROXY; "none": the command's URL without its credential). Prints the
# status code and, through an open tunnel, what the echo server sent back.
CLIENT = tunnel.SOURCE + r'''
import base64, os, sys, urllib.parse
target, which = sys.argv[1], sys.argv[2]
if which in ("env", "none"):
    url = os.environ["HTTPS_PROXY"]
else:
    url = which
u = urllib.parse.urlsplit(url)
auth = ""
if u.username is not None and which != "none":
    token = base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    auth = f"Proxy-Authorization: Basic {token}\r\n"
s, head = connect_tunnel((u.hostname, u.port), target, step=1, headers=auth)
code = head.split(b" ")[1].decode() if head else "eof"
if code == "200":
    s.sendall(b"ping\n")
    code += " " + s.recv(100).decode().strip()
print(code, flush=True)
'''


def _client(target, which="env") -> list[str]:
    return [python_in_sandbox(), "-I", "-c", CLIENT, target, which]


def _policy(tmp_path, hosts):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return pysandbox.Policy.default(workdir=work, network="proxy", allow_hosts=tuple(hosts))


def _fds() -> set:
    """(descriptor, what it is) of this process, the listing's own one left out."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except FileNotFoundError:
            pass
    return out


def _proxy_threads() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("pysandbox-proxy")]


@pytest.fixture
def echo():
    servers = [LoopbackServer(loopback.echo), LoopbackServer(loopback.echo)]
    yield [f"127.0.0.1:{s.port}" for s in servers]
    for s in servers:
        s.close()


@pytest.fixture
def sb(backend, tmp_path, echo):
    with pysandbox.Sandbox(_policy(tmp_path, echo), backend=backend) as box:
        yield box


def _run(sb, argv, **kw):
    done = sb.run(argv, capture_output=True, text=True, timeout=120, **kw)
    assert done.returncode == 0, done.stderr
    return done


def _reasons(record) -> list:
    return sorted((e.verdict, e.reason) for e in record.events)


# ---------------------------------------------------------------- attribution

def test_each_command_has_its_own_credential_and_record(sb, echo):
    first = _run(sb, ["sh", "-c", f"echo $HTTP_PROXY; {_sh(_client(echo[0]))}; {_sh(_client('127.0.0.1:1'))}"])
    second = _run(sb, ["sh", "-c", f"echo $ALL_PROXY; {_sh(_client(echo[1]))}"])
    url, ok, refused = first.stdout.split("\n")[:3]
    assert url.startswith("http://c") and url.endswith("@127.0.0.1:3128"), url
    assert (ok, refused) == ("200 ping", "403"), first.stdout
    url2, ok2 = second.stdout.split("\n")[:2]
    assert url2.startswith("socks5h://c") and url2.split("@")[0][10:] != url.split("@")[0][7:]
    assert ok2 == "200 ping"
    assert first.proxy.counts == {"allowed": 1, "refused": 1}
    assert _reasons(first.proxy) == [("allowed", "ok"), ("refused", "ip_literal_not_listed")]
    assert second.proxy.counts == {"allowed": 1, "refused": 0}
    assert [e.port for e in second.proxy.events] == [int(echo[1].rsplit(":", 1)[1])]
    assert sb.proxy.counts == {"allowed": 0, "refused": 0}    # nothing unattributed


def _sh(argv) -> str:
    import shlex
    return " ".join(shlex.quote(a) for a in argv)


def test_a_connection_without_a_live_credential_is_refused_and_recorded_on_the_session(sb, echo):
    first = _run(sb, ["sh", "-c", "echo $HTTPS_PROXY"])
    stale = first.stdout.strip()
    user, password = stale[7:].split("@")[0].split(":")
    forged = f"http://{user}:{password[:-1]}{'A' if password[-1] != 'A' else 'B'}@127.0.0.1:3128"
    done = _run(sb, ["sh", "-c", "; ".join(_sh(_client(echo[0], w)) for w in ("none", stale, forged, "env"))])
    # no credential, the credential of a command that ended, a forged one: 407; the
    # command's own (the live control): served
    assert done.stdout.split("\n")[:4] == ["407", "407", "407", "200 ping"], done.stdout
    assert _reasons(done.proxy) == [("allowed", "ok")]
    assert _reasons(sb.proxy) == [("refused", "proxy_auth_required")] * 3
    assert first.proxy.counts == {"allowed": 0, "refused": 0}


def _steal(sb, echo):
    """A command reads a concurrent command's HTTPS_PROXY from /proc/PID/environ and uses
    it; after that command ended, the same credential again. Returns (what the read
    gave, the thief's result, the late result, the victim)."""
    victim = sb.Popen(["sh", "-c", "read x"], stdin=pysandbox.PIPE)
    try:
        stolen = sb.run(["sh", "-c", f"tr '\\0' '\\n' < /proc/{victim.pid}/environ | sed -n 's/^HTTPS_PROXY=//p'"],
                        capture_output=True, text=True, timeout=120)
        url = stolen.stdout.strip()
        borrowed = _run(sb, _client(echo[0], url)) if url else None
    finally:
        victim.communicate(b"x\n", timeout=60)
    late = _run(sb, _client(echo[0], url)) if url else None
    return stolen, borrowed, late, victim


def _landlock_domains(policy) -> bool:
    from pysandbox.backends import landlock
    from pysandbox.plan import command_may_mount
    return landlock.kind(command_may_mount(policy.allow_nested_userns, policy.caps_keep)) != landlock.NONE


def test_a_concurrent_commands_credential_cannot_be_read(sb, echo):
    # Each command of a session is in a Landlock domain of its own (session.py's -L):
    # Landlock refuses every ptrace access check across domains, /proc/PID/environ's
    # included, though both commands are one uid.
    if not _landlock_domains(sb.policy):
        need("landlock", "no Landlock domain per command here (kernel without Landlock): "
                         "see test_control_without_landlock_a_credential_can_be_borrowed_while_its_command_runs")
    stolen, borrowed, _, victim = _steal(sb, echo)
    assert stolen.stdout == "" and "Permission denied" in stolen.stderr, (stolen.stdout, stolen.stderr)
    assert borrowed is None and victim.proxy.counts == {"allowed": 0, "refused": 0}
    # live control: the same read of a process of its own (a child) works
    # (polled: a child read between its fork and its exec shows an empty environ)
    own = _run(sb, ["sh", "-c", "sleep 30 & p=$!; i=0; while [ $i -lt 200 ] && ! tr '\\0' '\\n' < /proc/$p/environ "
                                "| grep -q ^HTTPS_PROXY=http; do sleep 0.05; i=$((i+1)); done; "
                                "tr '\\0' '\\n' < /proc/$p/environ | grep -c ^HTTPS_PROXY=http; kill $p"])
    assert own.stdout == "1\n", own.stdout


def test_control_without_landlock_a_credential_can_be_borrowed_while_its_command_runs(backend, tmp_path, echo,
                                                                                       monkeypatch):
    """What holds where commands share no Landlock boundary (THREAT_MODEL.md): the
    borrowed credential is the victim's (recorded on it, within the session's list) and
    dies with the victim."""
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    with pysandbox.Sandbox(_policy(tmp_path, echo), backend=backend) as box:
        stolen, borrowed, late, victim = _steal(box, echo)
        session = _reasons(box.proxy)
    assert stolen.stdout.startswith(f"http://{victim.proxy.user}:"), (stolen.stdout, stolen.stderr)
    assert borrowed.stdout.strip() == "200 ping"          # the attack works while the victim runs
    assert borrowed.proxy.counts == {"allowed": 0, "refused": 0}
    assert victim.proxy.revoked and victim.proxy.counts == {"allowed": 1, "refused": 0}
    assert late.stdout.strip() == "407"                   # and not once it ended
    assert session == [("refused", "proxy_auth_required")]


# A command that opens a tunnel to argv[1] with its credential and hands the socket to
# the command listening on the unix socket argv[2] (SCM_RIGHTS), then waits for stdin.
GIVER = CLIENT.split("s, head = connect_tunnel")[0] + r'''
s, head = connect_tunnel((u.hostname, u.port), target, step=1, headers=auth)
assert head.startswith(b"HTTP/1.1 200"), head
u = socket.socket(socket.AF_UNIX)
u.connect(sys.argv[3])
socket.send_fds(u, [b"x"], [s.fileno()])
print("given", flush=True)
sys.stdin.readline()
'''

# Receives two tunnels on the unix socket argv[1]; on each stdin line, pings through the
# next one and prints what came back ("eof" when the tunnel was closed).
TAKER = r'''
import socket, sys
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1]); srv.listen(2)
print("listening", flush=True)
got = []
for _ in range(2):
    c, _ = srv.accept()
    _, fds, _, _ = socket.recv_fds(c, 1, 1)
    got.append(socket.socket(fileno=fds[0]))
print("taken", flush=True)
for t in got:
    sys.stdin.readline()
    t.settimeout(30)
    try:
        t.sendall(b"ping\n")
        print(t.recv(100).decode().strip() or "eof", flush=True)
    except OSError:
        print("eof", flush=True)
'''


def test_a_tunnel_handed_to_another_command_ends_with_its_owner(sb, echo):
    path = "/tmp/tunnels.sock"
    taker = sb.Popen([python_in_sandbox(), "-I", "-c", TAKER, path], stdin=pysandbox.PIPE, stdout=pysandbox.PIPE,
                     text=True)
    try:
        assert taker.stdout.readline().strip() == "listening"
        givers = [sb.Popen([python_in_sandbox(), "-I", "-c", GIVER, echo[0], "env", path], stdin=pysandbox.PIPE,
                           stdout=pysandbox.PIPE, text=True) for _ in range(2)]
        for g in givers:
            assert g.stdout.readline().strip() == "given"
        assert taker.stdout.readline().strip() == "taken"
        # control: the first tunnel works in the other command while its owner runs
        taker.stdin.write("\n")
        taker.stdin.flush()
        first = taker.stdout.readline().strip()
        # (the tunnels were accepted in the order the givers connected: either is first)
        owners_alive = first == "ping"
        for g in givers:
            g.communicate("\n", timeout=60)
        taker.stdin.write("\n")
        taker.stdin.flush()
        second = taker.stdout.readline().strip()
    finally:
        taker.kill()
        taker.communicate(timeout=60)
    assert owners_alive, first
    assert second == "eof"     # its owner ended: the engine closed it
    for g in givers:
        assert g.proxy.revoked and g.proxy.counts == {"allowed": 1, "refused": 0}


# ---------------------------------------------------------------- allow lists

def test_a_commands_allow_list_narrows_and_never_widens(sb, echo):
    narrowed = _run(sb, ["sh", "-c", f"{_sh(_client(echo[0]))}; {_sh(_client(echo[1]))}"], allow_hosts=[echo[0]])
    assert narrowed.stdout.split("\n")[:2] == ["200 ping", "403"], narrowed.stdout
    assert _reasons(narrowed.proxy) == [("allowed", "ok"), ("refused", "ip_literal_not_listed")]
    control = _run(sb, _client(echo[1]))          # the session's list allows it
    assert control.stdout.strip() == "200 ping"
    for wider in (["127.0.0.1:1"], [echo[0], "pypi.org"], ["*.example.org"]):
        with pytest.raises(PolicyError) as err:
            sb.run(["true"], allow_hosts=wider)
        assert err.value.reason == Reason.ALLOW_LIST_WIDENED, wider
    with pytest.raises(PolicyError) as err:
        sb.run(["true"], allow_hosts=["http://x"])
    assert err.value.reason == Reason.INVALID_VALUE
    with pytest.raises(PolicyError) as err:
        sb.Popen(["true"], allow_hosts=echo[0])    # one string, not a list
    assert err.value.reason == Reason.INVALID_VALUE
    assert _run(sb, ["true"], allow_hosts=[]).proxy.counts == {"allowed": 0, "refused": 0}


def test_allow_hosts_needs_a_session_in_proxy_mode(backend, tmp_path):
    with pysandbox.Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend=backend) as box:
        with pytest.raises(PolicyError) as err:
            box.run(["true"], allow_hosts=["pypi.org"])
        assert err.value.reason == Reason.CONFLICTING_OPTIONS
        assert box.proxy is None and not hasattr(box.run(["true"]), "proxy")


def test_a_commands_on_proxy_event(sb, echo):
    seen = []
    done = _run(sb, _client(echo[0]), on_proxy_event=seen.append)
    events = done.proxy.events   # first: it waits until the command's connections ended
    assert [e.reason for e in seen] == ["ok"] and events == seen


# ---------------------------------------------------------------- lifetime

def test_one_engine_for_the_session_closed_with_it(backend, tmp_path, echo):
    with pysandbox.Sandbox(_policy(tmp_path, echo), backend=backend) as warm:
        warm.run(["true"])        # what the first launch caches (the programs' memfds) is not ours
    fds_before = _fds()
    threads_before = _proxy_threads()
    box = pysandbox.Sandbox(_policy(tmp_path, echo), backend=backend)
    try:
        engine = box.proxy._engine
        assert engine is not None and len(_proxy_threads()) == len(threads_before) + 1
        for _ in range(3):
            assert _run(box, _client(echo[0])).stdout.strip() == "200 ping"
        assert box.proxy._engine is engine           # one engine for every command
    finally:
        box.close()
    assert _proxy_threads() == threads_before
    assert _fds() <= fds_before, _fds() - fds_before


def test_a_pool_gives_each_sandbox_its_engine(backend, tmp_path, echo):
    threads_before = _proxy_threads()
    with pysandbox.Pool(_policy(tmp_path, echo), size=1, backend=backend) as pool:
        runs = [pool.run(["sh", "-c", f"{_sh(_client(echo[0]))}; {_sh(_client('127.0.0.1:1'))}"],
                         capture_output=True, text=True, timeout=120) for _ in range(2)]
        narrowed = pool.run(_client(echo[1]), allow_hosts=[echo[0]], capture_output=True, text=True, timeout=120)
        with pytest.raises(PolicyError) as err:
            pool.run(["true"], allow_hosts=["127.0.0.1:1"])
        assert err.value.reason == Reason.ALLOW_LIST_WIDENED
    for done in runs:
        assert done.stdout.split("\n")[:2] == ["200 ping", "403"], done.stdout + done.stderr
        assert done.proxy.counts == {"allowed": 1, "refused": 1}
    assert narrowed.stdout.strip() == "403" and narrowed.proxy.counts == {"allowed": 0, "refused": 1}
    assert _proxy_threads() == threads_before


def test_an_asyncio_session_in_proxy_mode(backend, tmp_path, echo):
    async def main():
        async with aio.Sandbox(_policy(tmp_path, echo), backend=backend) as box:
            done = await box.run(_client(echo[0]), capture_output=True, timeout=120)
            narrowed = await box.run(_client(echo[0]), capture_output=True, timeout=120, allow_hosts=[echo[1]])
            stale = await box.run(["sh", "-c", "echo $HTTPS_PROXY"], capture_output=True, timeout=120)
            late = await box.run(_client(echo[0], stale.stdout.decode().strip()), capture_output=True, timeout=120)
            return done, narrowed, late, box._sync.proxy
    done, narrowed, late, session = asyncio.run(main())
    assert done.stdout.strip() == b"200 ping" and done.proxy.counts == {"allowed": 1, "refused": 0}
    assert narrowed.stdout.strip() == b"403" and narrowed.proxy.counts == {"allowed": 0, "refused": 1}
    assert late.stdout.strip() == b"407" and _reasons(session) == [("refused", "proxy_auth_required")]


# SOCKS5 through the proxy of ALL_PROXY: no-auth only, a wrong password, the command's
# own credential (RFC 1929); prints the proxy's answers.
SOCKS = r'''
import os, socket, struct, sys, urllib.parse
u = urllib.parse.urlsplit(os.environ["ALL_PROXY"])
host, port = sys.argv[1].rsplit(":", 1)
def attempt(methods, user=None, password=None):
    s = socket.create_connection((u.hostname, u.port), timeout=20)
    s.sendall(bytes([5, len(methods), *methods]))
    chosen = s.recv(2)
    if chosen != b"\x05\x02":
        return chosen.hex()
    s.sendall(bytes([1, len(user)]) + user + bytes([len(password)]) + password)
    status = s.recv(2)
    if status != b"\x01\x00":
        return "auth " + status.hex()
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + struct.pack(">H", int(port)))
    rep = s.recv(10)
    s.sendall(b"ping\n")
    return "connect " + rep[:2].hex() + " " + s.recv(100).decode().strip()
print(attempt([0]))
print(attempt([0, 2], u.username.encode(), b"wrong"))
print(attempt([0, 2], u.username.encode(), u.password.encode()))
'''


def test_socks5_asks_for_the_commands_credential(sb, echo):
    done = _run(sb, [python_in_sandbox(), "-I", "-c", SOCKS, echo[0]])
    assert done.stdout.splitlines() == ["05ff", "auth 0101", "connect 0500 ping"], done.stdout
    assert _reasons(done.proxy) == [("allowed", "ok")]
    assert _reasons(sb.proxy) == [("refused", "proxy_auth_required")] * 2
