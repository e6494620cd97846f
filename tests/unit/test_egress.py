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
