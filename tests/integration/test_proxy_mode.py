"""Network proxy mode, the plumbing (docs/ARCHITECTURE.md, "Network proxy mode"), on
both backends: the listener made inside the sandbox's network namespace before the
command, the environment, the proxy's lifetime, what a hostile command can reach, the
events, sessions refusing it.

Traffic goes only to loopback: the sandbox's own (the proxy's listener) and host
listeners the tests open on 127.0.0.1. Every refusal has a live control: the same
target reached where it should be (allow mode, or the address listed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

import pysandbox
from pysandbox.errors import PolicyError, Reason
from tests.support import loopback, python_in_sandbox, settled_fds, tunnel
from tests.support.loopback import LoopbackServer

pytestmark = pytest.mark.requires("userns")

PORT = 3128   # pysandbox.policy.PROXY_PORT: the tests state it, a change must be deliberate


def _policy(tmp_path, hosts=(), network="proxy"):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if network != "proxy":
        return pysandbox.Policy.default(workdir=work, network=network)
    return pysandbox.Policy.default(workdir=work, network="proxy", allow_hosts=hosts)


def _py(code: str) -> list[str]:
    return [python_in_sandbox(), "-I", "-c", code]


@pytest.fixture
def echo():
    e = LoopbackServer(loopback.one_line)
    yield e
    e.close()


# A CONNECT through the proxy named by HTTPS_PROXY: prints the status line, then what the
# upstream said first (if the tunnel opened).
CONNECT = tunnel.SOURCE + r'''
import os, sys
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].rsplit("@", 1)[-1]   # (a session's: no credential sent)
host, port = proxy.rsplit(":", 1)
s, head = connect_tunnel((host, int(port)), sys.argv[1], step=1)
print(head.split(b"\r\n")[0].decode())
if b" 200 " in head.split(b"\r\n")[0] + b" ":
    s.settimeout(20)
    print(s.recv(100).decode().strip())
'''


# ---------------------------------------------------------------- the listener and the environment

def test_listener_is_listening_before_the_command_starts(backend, tmp_path):
    # The command's first action reads its namespace's TCP table: the proxy's listener is
    # there already (state 0A = LISTEN), at 127.0.0.1:3128, made by the setup.
    done = pysandbox.run(["cat", "/proc/net/tcp"], policy=_policy(tmp_path), backend=backend,
                         capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listening = [line.split() for line in done.stdout.splitlines()[1:] if line.split()[3] == "0A"]
    assert [row[1] for row in listening] == [f"0100007F:{PORT:04X}"]


def test_first_connect_is_served_and_refused_with_an_event(backend, tmp_path):
    # No retry loop in the command: its first connect reaches a served proxy.
    events = []
    done = pysandbox.run(_py(CONNECT) + ["not-listed.test:443"], policy=_policy(tmp_path, ("pypi.org",)),
                         backend=backend, capture_output=True, text=True, on_proxy_event=events.append)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "403", done.stdout
    assert [(e.host, e.port, e.verdict) for e in events] == [("not-listed.test", 443, "refused")]
    assert done.proxy.counts == {"allowed": 0, "refused": 1}
    assert [e.host for e in done.proxy.events] == ["not-listed.test"]


def test_proxy_environment_wins_over_the_callers(backend, tmp_path):
    env = dict(os.environ, HTTP_PROXY="http://corp.example:8080", https_proxy="http://corp.example:8080",
               NO_PROXY="localhost,127.0.0.1", no_proxy="*")
    done = pysandbox.run(["env"], policy=_policy(tmp_path), backend=backend, env=env,
                         capture_output=True, text=True)
    got = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    http, socks = f"http://127.0.0.1:{PORT}", f"socks5h://127.0.0.1:{PORT}"
    for name, value in (("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks)):
        assert got[name] == value and got[name.lower()] == value
    assert "NO_PROXY" not in got and "no_proxy" not in got


def test_policy_cannot_set_the_proxy_variables(tmp_path):
    for name in ("HTTP_PROXY", "no_proxy", "ALL_PROXY"):
        with pytest.raises(PolicyError) as err:
            pysandbox.Policy.default(workdir=tmp_path, network="proxy", env=pysandbox.Env(set={name: "x"}))
        assert err.value.reason == Reason.CONFLICTING_OPTIONS
    # control: in deny mode the policy may set them (they reach nothing there)
    pysandbox.Policy.default(workdir=tmp_path, network="deny", env=pysandbox.Env(set={"HTTP_PROXY": "x"}))


# ---------------------------------------------------------------- what a hostile command can reach

def test_direct_tcp_and_udp_to_the_host_fail_with_live_control(backend, tmp_path, echo):
    script = r'''
import socket, sys
port = int(sys.argv[1])
try:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    print("tcp", s.recv(100).decode().strip())
except OSError as exc:
    print("tcp-failed", exc.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("10.255.255.1", 9))
    print("udp-sent")
except OSError as exc:
    print("udp-failed", exc.errno)
'''
    proxied = pysandbox.run(_py(script) + [str(echo.port)], policy=_policy(tmp_path, (f"127.0.0.1:{echo.port}",)),
                            backend=backend, capture_output=True, text=True)
    assert proxied.stdout.split("\n")[0].startswith("tcp-failed"), proxied.stdout + proxied.stderr
    assert "udp-failed" in proxied.stdout   # no route: only lo
    assert echo.hits == 0
    # live control: the same script in allow mode reaches the host listener
    allowed = pysandbox.run(_py(script) + [str(echo.port)], policy=_policy(tmp_path, network="allow"),
                            backend=backend, capture_output=True, text=True)
    assert "tcp HOST-ECHO" in allowed.stdout, allowed.stdout + allowed.stderr
    assert echo.hits == 1


def test_host_loopback_through_the_proxy_is_refused_unless_listed(backend, tmp_path, echo):
    # The proxy runs in the host's network namespace: its loopback is the host's. An IP
    # literal and a name resolving to 127.0.0.1 are refused; listing the address (the
    # control) shows the listener is live and reachable through the same proxy.
    resolver = {"loopback.test": ["127.0.0.1"]}

    def resolve(host, port):
        if host not in resolver:
            raise OSError(f"test resolver: no such name {host!r}")
        return list(resolver[host])

    target = f"127.0.0.1:{echo.port}"
    for hosts, ask in (((), target), (("loopback.test:%d" % echo.port,), f"loopback.test:{echo.port}"),
                       (("*.test:%d" % echo.port,), f"loopback.test:{echo.port}")):
        done = pysandbox.run(_py(CONNECT) + [ask], policy=_policy(tmp_path, hosts), backend=backend,
                             capture_output=True, text=True, _proxy_resolver=resolve)
        assert done.stdout.split()[1] == "403", (hosts, done.stdout, done.stderr)
        assert done.proxy.counts["refused"] == 1
    assert echo.hits == 0
    control = pysandbox.run(_py(CONNECT) + [target], policy=_policy(tmp_path, (target,)), backend=backend,
                            capture_output=True, text=True, _proxy_resolver=resolve)
    assert control.stdout.split("\n")[:2] == [control.stdout.split("\n")[0], "HOST-ECHO"], control.stdout
    assert control.stdout.split()[1] == "200"
    assert echo.hits == 1 and control.proxy.counts["allowed"] == 1


def test_200_concurrent_connections_from_inside(backend, tmp_path, echo):
    script = tunnel.SOURCE + r'''
import os, sys, threading
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].rsplit(":", 1)
target = sys.argv[1]
ok = []
def one():
    s, data = connect_tunnel((proxy[0], int(proxy[1])), target, until=b"HOST-ECHO", timeout=60)
    ok.append(b" 200 " in data and b"HOST-ECHO" in data)
    s.close()
threads = [threading.Thread(target=one) for _ in range(200)]
for t in threads: t.start()
for t in threads: t.join(120)
print(sum(ok))
'''
    target = f"127.0.0.1:{echo.port}"
    done = pysandbox.run(_py(script) + [target], policy=_policy(tmp_path, (target,)), backend=backend,
                         capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "200", done.stdout + done.stderr
    assert done.proxy.counts == {"allowed": 200, "refused": 0}
    assert echo.hits == 200


# ---------------------------------------------------------------- lifetime

def _proxy_threads() -> list:
    """The engine's threads (pysandbox/proxy/server.py names them)."""
    return [t for t in threading.enumerate() if t.name.startswith("pysandbox-proxy")]


def _socket_inodes() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def test_listener_thread_and_descriptors_are_gone_when_the_sandbox_ends(backend, tmp_path):
    fds_before = settled_fds()
    assert _proxy_threads() == []
    # The listener's inode, read inside; held by this process while the sandbox runs.
    proc = pysandbox.Popen(["sh", "-c", "cat /proc/net/tcp; read x"], policy=_policy(tmp_path), backend=backend,
                           stdin=pysandbox.PIPE, stdout=pysandbox.PIPE, text=True)
    first = proc.stdout.readline() and proc.stdout.readline().split()
    inode = first[9]
    assert inode in _socket_inodes()                             # control: ours while it runs
    assert _proxy_threads()                                      # control: the proxy's thread
    proc.communicate("\n", timeout=60)
    assert proc.returncode == 0
    assert inode not in _socket_inodes()
    assert _proxy_threads() == []
    assert settled_fds() == fds_before


def test_killed_sandbox_closes_its_proxy(backend, tmp_path):
    assert _proxy_threads() == []
    proc = pysandbox.Popen(["sleep", "60"], policy=_policy(tmp_path), backend=backend)
    assert _proxy_threads()   # control: it runs while the sandbox does
    proc.kill()
    proc.wait(timeout=60)
    assert _proxy_threads() == []


def test_timeout_closes_the_proxy(backend, tmp_path):
    assert _proxy_threads() == []
    with pytest.raises(pysandbox.TimeoutExpired):
        pysandbox.run(["sleep", "60"], policy=_policy(tmp_path), backend=backend, timeout=0.5, kill_grace=0.5)
    assert _proxy_threads() == []


def test_failed_launch_closes_the_proxy(backend, tmp_path):
    fds_before = settled_fds()
    assert _proxy_threads() == []
    with pytest.raises(FileNotFoundError):
        pysandbox.run(["/no/such/command"], policy=_policy(tmp_path), backend=backend)
    assert _proxy_threads() == []
    assert settled_fds() == fds_before


def test_callback_exception_does_not_break_the_proxy(backend, tmp_path):
    def boom(event):
        raise RuntimeError("caller bug")
    done = pysandbox.run(_py(CONNECT + CONNECT) + ["a.test:443"], policy=_policy(tmp_path), backend=backend,
                         capture_output=True, text=True, on_proxy_event=boom)
    assert done.stdout.split("\n")[0].split()[1] == "403" and done.stdout.split("\n")[1].split()[1] == "403"
    assert done.proxy.counts["refused"] == 2


# ---------------------------------------------------------------- refused uses

def test_sessions_run_proxy_mode_with_a_credential_per_command(backend, tmp_path, echo):
    # (they refused it before; tests/integration/test_session_proxy.py has the rest) the
    # proxy variables carry the command's credential; a request without one is refused
    # (407) and recorded on the session, the same request with it (the live control) is
    # decided by the allow list and recorded on the command
    target = f"127.0.0.1:{echo.port}"
    with pysandbox.Sandbox(_policy(tmp_path, (target,)), backend=backend) as sb:
        done = sb.run(_py(CONNECT) + [target], capture_output=True, text=True, timeout=60)
        env = sb.run(["sh", "-c", "echo $HTTPS_PROXY"], capture_output=True, text=True, timeout=60)
        unattributed = sb.proxy.counts
    assert done.stdout.split("\n")[0].split()[1] == "407", done.stdout + done.stderr
    assert unattributed == {"allowed": 0, "refused": 1} and done.proxy.counts == {"allowed": 0, "refused": 0}
    assert env.stdout.startswith("http://c") and env.stdout.strip().endswith(f"@127.0.0.1:{PORT}")


def test_on_proxy_event_must_be_callable(tmp_path):
    with pytest.raises(PolicyError):
        pysandbox.Popen(["true"], policy=_policy(tmp_path), on_proxy_event="nope")


def test_status_reports_proxy_mode(backend, tmp_path):
    st = pysandbox.status(_policy(tmp_path, ("pypi.org",)), backend=backend)
    assert st.available and st.network_mode == "proxy"
    assert st.network["proxy"].available and st.network["deny"].available


# ---------------------------------------------------------------- the command line

def test_cli_proxy_mode_refusals_summed_up_at_exit_each_with_verbose(backend, tmp_path):
    """Issue 31 item 3: without --verbose one line at exit names pysandbox, the host and
    the reason; --verbose prints each refusal as it happens too."""
    from tests.integration.test_cli import cli
    args = ["--network", "proxy", "--allow-host", "pypi.org", "--allow-host", "*.npmjs.org:443", "--"]
    probe = [python_in_sandbox(), "-I", "-c", CONNECT, "refused.test:443"]
    quiet = cli(backend, *args, *probe, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout.split()[1] == "403", quiet.stderr
    assert quiet.stderr.splitlines() == ["pysandbox: proxy refused 1 connection: refused.test:443 (not_allowed)"]
    loud = cli(backend, "-v", *args, *probe, cwd=tmp_path)
    assert loud.returncode == 0 and loud.stdout.split()[1] == "403", loud.stderr
    assert "proxy refused connect refused.test:443" in loud.stderr
    assert loud.stderr.splitlines()[-1] == "pysandbox: proxy refused 1 connection: refused.test:443 (not_allowed)"
    # control: nothing refused, no line
    clean = cli(backend, *args, "true", cwd=tmp_path)
    assert clean.returncode == 0 and "proxy refused" not in clean.stderr, clean.stderr


@pytest.mark.parametrize("configured", [False, True])
def test_library_refusals_never_reach_stderr_unless_logging_is_configured(backend, tmp_path, configured):
    """A library never configures logging (pysandbox/logs.py): a caller that passed
    on_proxy_event= gets the event and no refusal on its stderr through logging's
    last-resort handler. Control: a caller that configured logging gets the record."""
    work = tmp_path / "work"
    work.mkdir()
    code = (("import logging; logging.basicConfig(format='LOG %(message)s')\n" if configured else "")
            + "import pysandbox, sys\n"
            f"policy = pysandbox.Policy.default(workdir={str(work)!r}, network='proxy', allow_hosts=['pypi.org'])\n"
            "events = []\n"
            f"done = pysandbox.run([{python_in_sandbox()!r}, '-I', '-c', {CONNECT!r}, 'refused.test:443'],\n"
            f"                     policy=policy, backend={backend!r}, capture_output=True, text=True,\n"
            "                     on_proxy_event=events.append)\n"
            "print(done.stdout.split()[1], [(e.host, e.verdict) for e in events])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "403 [('refused.test', 'refused')]"
    if configured:
        assert "LOG proxy refused connect refused.test:443" in done.stderr, done.stderr
    else:
        assert done.stderr == "", done.stderr


@pytest.mark.parametrize("args, names", [
    (["--network", "proxy", "--allow-host", "has space"], "--allow-host"),
    (["--network", "proxy", "--allow-host", ""], "--allow-host"),
    (["--allow-host", "pypi.org"], "--allow-host"),                       # needs --network proxy
    (["--network", "deny", "--allow-host", "pypi.org"], "--allow-host"),
    (["--network", "proxy", "--setenv", "HTTP_PROXY", "http://x"], "HTTP_PROXY"),
])
def test_cli_proxy_usage_errors_exit_2(args, names, tmp_path):
    from tests.integration.test_cli import cli
    done = cli("native", *args, "--", "sh", "-c", "echo ran", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "ran" not in done.stdout and "Traceback" not in done.stderr
    assert names in done.stderr.strip().splitlines()[-1]


def test_cli_status_reports_proxy(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--network", "proxy", "--allow-host",
                           "pypi.org", "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["network_mode"] == "proxy" and got["network"]["proxy"]["available"]
    assert all(b["network"]["proxy"]["available"] for b in got["backends"].values() if b["available"])


# ---------------------------------------------------------------- the rest of deny mode holds

def test_proxy_mode_keeps_deny_modes_seccomp_and_authority_masking(tmp_path):
    from pysandbox import authority, plan as P
    deny, proxy = _policy(tmp_path, network="deny"), _policy(tmp_path, ("pypi.org",))
    progs = [[op.program for op in P.compile(p).ops if isinstance(op, P.Seccomp)] for p in (deny, proxy)]
    assert progs[0] == progs[1]
    assert set(authority.ENV_VARIABLES) <= set(proxy.env.unset)
    assert [op for op in proxy.fs if isinstance(op, pysandbox.Hide)] == \
        [op for op in deny.fs if isinstance(op, pysandbox.Hide)]
    # control: allow mode has neither the family refusals nor the masking
    allow = _policy(tmp_path, network="allow")
    assert [op.program for op in P.compile(allow).ops if isinstance(op, P.Seccomp)] != progs[0]
    assert not set(authority.ENV_VARIABLES) & set(allow.env.unset)


def test_vsock_refused_inside_with_live_control(backend, tmp_path):
    script = r'''
import errno, socket
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    print("made")
except OSError as exc:
    print(errno.errorcode.get(exc.errno, exc.errno))
'''
    control = pysandbox.run(_py(script), policy=_policy(tmp_path, network="allow"), backend=backend,
                            capture_output=True, text=True)
    if control.stdout.strip() == "EAFNOSUPPORT":
        from tests.support import not_applicable
        not_applicable("no vsock transport on this host to refuse")
    done = pysandbox.run(_py(script), policy=_policy(tmp_path), backend=backend, capture_output=True, text=True)
    assert done.stdout.strip() == "EAFNOSUPPORT", done.stdout + done.stderr


def test_asyncio_run_has_the_proxy_and_closes_it(backend, tmp_path):
    import asyncio
    import pysandbox.aio
    assert _proxy_threads() == []
    events = []
    done = asyncio.run(pysandbox.aio.run(_py(CONNECT) + ["not-listed.test:443"], policy=_policy(tmp_path),
                                         backend=backend, capture_output=True, on_proxy_event=events.append))
    assert done.stdout.split()[1] == b"403", done.stderr
    assert done.proxy.counts == {"allowed": 0, "refused": 1} and [e.host for e in events] == ["not-listed.test"]
    assert _proxy_threads() == []


def test_cli_interrupted_ends_sandbox_and_proxy(backend, tmp_path):
    import signal
    proc = subprocess.Popen([sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--network", "proxy",
                             "--", "sh", "-c", "echo ready; sleep 60"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_command_cannot_take_over_the_proxy_port(backend, tmp_path):
    # Root inside (its own user namespace), no capabilities: it cannot bind the proxy's
    # port beside the listener (no SO_REUSEPORT on ours) nor kill its sockets; the
    # control binds another loopback port in the same script.
    script = r'''
import errno, socket
for port in (3128, 3129):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        print(port, "bound")
    except OSError as exc:
        print(port, errno.errorcode.get(exc.errno, exc.errno))
'''
    done = pysandbox.run(_py(script), policy=_policy(tmp_path), backend=backend, capture_output=True, text=True)
    assert done.stdout.splitlines() == ["3128 EADDRINUSE", "3129 bound"], done.stdout + done.stderr


def test_ipv6_loopback_listener_is_the_same_proxy(backend, tmp_path):
    from tests.support import host_capability
    if host_capability("ipv6") is not None:
        from tests.support import not_applicable
        not_applicable("no IPv6 here: only 127.0.0.1 is served")
    script = r'''
import socket
s = socket.create_connection(("::1", 3128), timeout=20)
s.sendall(b"CONNECT v6.test:443 HTTP/1.1\r\nHost: v6.test:443\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode())
'''
    done = pysandbox.run(_py(script), policy=_policy(tmp_path), backend=backend, capture_output=True, text=True)
    assert done.stdout.split()[1] == "403", done.stdout + done.stderr
    assert [(e.host, e.verdict) for e in done.proxy.events] == [("v6.test", "refused")]


def test_launch_without_the_proxy_socket_fails_closed(backend, tmp_path):
    # The negative twin of the hand-over: a launch of a proxy plan with no socket to send
    # the listener over never runs the command (typed setup error, stage "proxy listener").
    from pysandbox.backends import get_backend
    from pysandbox.backends.base import Launch
    from pysandbox.errors import SetupError
    from pysandbox.process import compiled
    marker = tmp_path / "work" / "ran"
    plan = compiled(_policy(tmp_path))
    with pytest.raises(SetupError) as err:
        get_backend(backend).spawn(plan, Launch(argv=["sh", "-c", f"touch {marker}"],
                                                env={"PATH": os.environ["PATH"]}))
    assert err.value.stage == "proxy listener", err.value
    assert not marker.exists()
