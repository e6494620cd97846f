"""pysandbox/egress.py without a sandbox: the hand-over protocol (listeners received
over the launch's socket), the failure when none came, the environment."""

from __future__ import annotations

import os
import socket

import pytest

from pysandbox.egress import Egress, apply_proxy_env, proxy_env
from pysandbox.errors import PolicyError, Reason, SetupError


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_listener_sent_over_the_launch_socket_is_served_and_closed():
    before = _fds()
    egress = Egress(("pypi.org",))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    theirs = socket.socket(fileno=os.dup(egress.their_fd))   # what the setup holds
    socket.send_fds(theirs, [b"L"], [listener.fileno()])
    theirs.close()
    listener.close()                                        # the setup closes its copy
    egress.start()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n")
        assert c.recv(100).split()[1] == b"403"
    egress.close()
    egress.close()                                          # idempotent
    assert egress.counts == {"allowed": 0, "refused": 1}
    assert [e.host for e in egress.events] == ["refused.test"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert _fds() == before


def test_no_listener_is_a_setup_error_and_leaves_nothing():
    before = _fds()
    egress = Egress(())
    with pytest.raises(SetupError) as err:
        egress.start()
    assert err.value.reason == Reason.SETUP_FAILED and err.value.stage == "proxy listener"
    egress.close()
    assert _fds() == before


def test_bad_allow_list_and_callback_are_policy_errors():
    with pytest.raises(PolicyError):
        Egress(("bad host",))
    with pytest.raises(PolicyError):
        Egress((), on_event=42)


def test_environment():
    env = {"HTTP_PROXY": "http://corp:1", "no_proxy": "localhost", "NO_PROXY": "*", "KEEP": "1"}
    apply_proxy_env(env, 3128)
    assert env == {"KEEP": "1", **proxy_env(3128)}
    assert proxy_env(3128) == {
        "HTTP_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
        "HTTPS_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
        "ALL_PROXY": "socks5h://127.0.0.1:3128", "all_proxy": "socks5h://127.0.0.1:3128"}


def test_plan_has_the_listener_right_after_loopback_in_proxy_mode_only(tmp_path):
    import pysandbox
    from pysandbox import plan as P
    ops = [type(op).__name__ for op in P.compile(pysandbox.Policy.default(workdir=tmp_path, network="proxy")).ops]
    assert ops[ops.index("LoopbackUp") + 1] == "ProxyListener"
    for mode in ("deny", "allow"):
        assert P.compile(pysandbox.Policy.default(workdir=tmp_path, network=mode)).first(P.ProxyListener) is None


def test_the_policys_proxy_bounds_reach_the_engine():
    # Network(head_timeout=, idle_timeout=, max_connections=) -> SandboxProcess -> Egress
    # -> EgressProxy; bad values and bounds outside proxy mode are refused.
    from pysandbox.policy import Network
    net = Network("proxy", ("pypi.org",), head_timeout=2.5, idle_timeout=7, max_connections=3)
    egress = Egress(net.allow_hosts, head_timeout=net.head_timeout, idle_timeout=net.idle_timeout,
                    max_connections=net.max_connections)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    theirs = socket.socket(fileno=os.dup(egress.their_fd))
    socket.send_fds(theirs, [b"L"], [listener.fileno()])
    theirs.close()
    listener.close()
    egress.start()
    try:
        engine = egress._engine
        assert (engine.head_timeout, engine.idle_timeout, engine.max_connections) == (2.5, 7, 3)
        assert engine.budget <= 3
    finally:
        egress.close()
    control = Network("proxy")
    assert (control.head_timeout, control.idle_timeout, control.max_connections) == (10.0, 300.0, 1024)
    for bad in ({"head_timeout": 0}, {"idle_timeout": float("nan")}, {"idle_timeout": "5"},
                {"max_connections": -1}, {"max_connections": 2.0}, {"head_timeout": True}):
        with pytest.raises(PolicyError) as err:
            Network("proxy", **bad)
        assert err.value.reason == Reason.INVALID_VALUE, bad
    with pytest.raises(PolicyError) as err:
        Network("deny", idle_timeout=5)
    assert err.value.reason == Reason.CONFLICTING_OPTIONS and err.value.field == "idle_timeout"
    with pytest.raises(TypeError):
        Egress((), handshake_timeout=5)
