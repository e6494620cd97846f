"""Network deny mode against a live host listener, on both backends.

Every blocked attempt is bracketed by host round trips to the listener, the
sandboxed script reports which call failed with which errno (proof the attempt
was made), and the same script in allow mode reaches the listener (control).
"""

from __future__ import annotations

import errno
import socket

import pytest

import pysandbox
from tests.security import oracles
from tests.support import host_capability, need

pytestmark = pytest.mark.requires("userns")

IPV4_FORMS = ("127.0.0.1", "localhost", "2130706433", "127.1", "0x7f000001", "0177.0.0.1")

TCP_SCRIPT = oracles.PRELUDE + r'''
port = int(sys.argv[1]); family = sys.argv[2]; forms = sys.argv[3:]
for form in forms:
    fam = socket.AF_INET6 if family == "6" else socket.AF_INET
    step("getaddrinfo")
    attempt(form + ":resolve", lambda: sorted({ai[4][0] for ai in socket.getaddrinfo(form, port, fam, socket.SOCK_STREAM)}))
    if not RESULTS[form + ":resolve"]["ok"]:
        continue
    def go():
        step("socket")
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            step("connect")
            s.connect((RESULTS[form + ":resolve"]["value"][0], port))
            step("send")
            s.sendall(b"INTRUDER " + form.encode() + b"\n")
            step("recv")
            return s.recv(100).decode()
        finally:
            s.close()
    attempt(form, go)
done()
'''

UDP_SCRIPT = oracles.PRELUDE + r'''
port = int(sys.argv[1]); family = sys.argv[2]; host = sys.argv[3]
fam = socket.AF_INET6 if family == "6" else socket.AF_INET
def go():
    step("socket")
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        step("sendto")
        sent = s.sendto(b"INTRUDER udp\n", (host, port))
        return sent
    finally:
        s.close()
attempt("udp", go)
done()
'''


def _policy(tmp_path, network):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return pysandbox.Policy.default(workdir=work, network=network)


def _have_ipv6():
    why = host_capability("ipv6")
    if why is not None:
        need("ipv6", why)


# ---------------------------------------------------------------- allow mode: controls

def test_allow_mode_reaches_host_tcp_every_ipv4_form(backend, tmp_path):
    with oracles.tcp4() as lst:
        lst.round_trip()
        res = oracles.run_probe(TCP_SCRIPT, _policy(tmp_path, "allow"), backend, (lst.port, "4", *IPV4_FORMS))
        lst.round_trip()
    for form in IPV4_FORMS:
        assert res[form + ":resolve"]["value"][0] == "127.0.0.1", (form, res)
        assert res[form]["ok"], (form, res[form])
        assert res[form]["value"] == "HOST-LISTENER\n"
    got = sorted(data for _, data in lst.foreign)
    assert got == sorted(b"INTRUDER " + f.encode() + b"\n" for f in IPV4_FORMS)


def test_allow_mode_reaches_host_udp(backend, tmp_path):
    with oracles.udp4() as lst:
        lst.round_trip()
        res = oracles.run_probe(UDP_SCRIPT, _policy(tmp_path, "allow"), backend, (lst.port, "4", "127.0.0.1"))
        lst.round_trip()
    assert res["udp"]["ok"], res
    assert [data for _, data in lst.foreign] == [b"INTRUDER udp\n"]


# ---------------------------------------------------------------- deny mode

def test_deny_mode_tcp_every_ipv4_form_refused(backend, tmp_path):
    with oracles.tcp4() as lst:
        lst.round_trip()
        res = oracles.run_probe(TCP_SCRIPT, _policy(tmp_path, "deny"), backend, (lst.port, "4", *IPV4_FORMS))
        lst.round_trip()
    assert lst.foreign == []
    for form in IPV4_FORMS:
        assert res[form + ":resolve"]["value"] == ["127.0.0.1"], (form, res)
        assert res[form]["ok"] is False, (form, res[form])
        assert res[form]["syscall"] == "connect", res[form]
        assert res[form]["errno"] == errno.ECONNREFUSED, res[form]


@pytest.mark.parametrize("target", ["::1", "::ffff:127.0.0.1"])
def test_deny_mode_tcp_ipv6_refused(backend, tmp_path, target):
    _have_ipv6()
    make = oracles.tcp6 if target == "::1" else oracles.tcp4
    with make() as lst:
        lst.round_trip()
        allow = oracles.run_probe(TCP_SCRIPT, _policy(tmp_path, "allow"), backend, (lst.port, "6", target))
        lst.round_trip()
        assert allow[target]["ok"], allow     # control: the same attempt reaches the host
        assert len(lst.foreign) == 1
        res = oracles.run_probe(TCP_SCRIPT, _policy(tmp_path, "deny"), backend, (lst.port, "6", target))
        lst.round_trip()
    assert len(lst.foreign) == 1   # nothing more than the control
    assert res[target]["ok"] is False and res[target]["syscall"] == "connect", res
    assert res[target]["errno"] in (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EADDRNOTAVAIL), res


@pytest.mark.parametrize("family", ["4", "6"])
def test_deny_mode_udp_never_arrives(backend, tmp_path, family):
    if family == "6":
        _have_ipv6()
    make, host = (oracles.udp4, "127.0.0.1") if family == "4" else (oracles.udp6, "::1")
    with make() as lst:
        lst.round_trip()
        allow = oracles.run_probe(UDP_SCRIPT, _policy(tmp_path, "allow"), backend, (lst.port, family, host))
        lst.round_trip()
        assert allow["udp"]["ok"] and [d for _, d in lst.foreign] == [b"INTRUDER udp\n"]   # control
        res = oracles.run_probe(UDP_SCRIPT, _policy(tmp_path, "deny"), backend, (lst.port, family, host))
        lst.round_trip()
    # The datagram was sent (into the sandbox's own loopback), and never reached the host.
    assert res["udp"]["ok"] is True and res["udp"]["value"] == len(b"INTRUDER udp\n"), res
    assert len(lst.foreign) == 1   # only the control's


LOCAL_LOOPBACK = oracles.PRELUDE + r'''
import time
def pair(kind, fam, host):
    srv = socket.socket(fam, kind)
    srv.bind((host, 0))
    if kind == socket.SOCK_STREAM:
        srv.listen(1)
    port = srv.getsockname()[1]
    pid = os.fork()
    if pid == 0:   # the second sandboxed process
        try:
            c = socket.socket(fam, kind)
            c.settimeout(5)
            if kind == socket.SOCK_STREAM:
                c.connect((host, port)); c.sendall(b"hello"); reply = c.recv(10)
            else:
                c.sendto(b"hello", (host, port)); reply = c.recvfrom(10)[0]
            os._exit(0 if reply == b"olleh" else 3)
        except BaseException:
            os._exit(4)
    srv.settimeout(10)
    if kind == socket.SOCK_STREAM:
        conn, _ = srv.accept(); data = conn.recv(10); conn.sendall(data[::-1]); conn.close()
    else:
        data, peer = srv.recvfrom(10); srv.sendto(data[::-1], peer)
    _, status = os.waitpid(pid, 0)
    return [data.decode(), os.waitstatus_to_exitcode(status)]
step("tcp4"); attempt("tcp4", lambda: pair(socket.SOCK_STREAM, socket.AF_INET, "127.0.0.1"))
step("udp4"); attempt("udp4", lambda: pair(socket.SOCK_DGRAM, socket.AF_INET, "127.0.0.1"))
if sys.argv[1] == "6":
    step("tcp6"); attempt("tcp6", lambda: pair(socket.SOCK_STREAM, socket.AF_INET6, "::1"))
    step("udp6"); attempt("udp6", lambda: pair(socket.SOCK_DGRAM, socket.AF_INET6, "::1"))
done()
'''


def test_deny_mode_loopback_between_sandboxed_processes(backend, tmp_path):
    v6 = host_capability("ipv6") is None
    res = oracles.run_probe(LOCAL_LOOPBACK, _policy(tmp_path, "deny"), backend, ("6" if v6 else "4",))
    for key in ("tcp4", "udp4") + (("tcp6", "udp6") if v6 else ()):
        assert res[key] == {"ok": True, "errno": 0, "value": ["hello", 0]}, (key, res)


NETLINK = oracles.PRELUDE + r'''
from pyroute2 import IPRoute
with IPRoute() as ipr:
    links = [(l.get_attr("IFLA_IFNAME"), bool(l["flags"] & 1)) for l in ipr.get_links()]
    routes = []
    for fam in (socket.AF_INET, socket.AF_INET6):
        for r in ipr.get_routes(family=fam, table=254):
            routes.append({"dst_len": r["dst_len"], "dst": r.get_attr("RTA_DST"), "oif": r.get_attr("RTA_OIF"),
                           "gateway": r.get_attr("RTA_GATEWAY")})
    names = {l["index"]: l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}
RESULTS["links"] = links
RESULTS["routes"] = [dict(r, oif=names.get(r["oif"])) for r in routes]
for label, fam, kind, proto in (("raw4", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                                ("raw6", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
                                ("packet", socket.AF_PACKET, socket.SOCK_RAW, 0x0300)):
    step("socket")
    attempt(label, lambda: socket.socket(fam, kind, proto).close())
done()
'''


def test_deny_mode_only_lo_no_default_route_no_raw_sockets(backend, tmp_path):
    why = host_capability("pyroute2")
    if why is not None:
        need("pyroute2", why)
    allow = oracles.run_probe(NETLINK, _policy(tmp_path, "allow"), backend)
    # control: in allow mode the same script sees the host's interfaces and routes
    assert {name for name, _ in allow["links"]} == {name for _, name in socket.if_nameindex()}
    res = oracles.run_probe(NETLINK, _policy(tmp_path, "deny"), backend)
    assert res["links"] == [["lo", True]], res
    assert [r for r in res["routes"] if r["dst_len"] == 0 or r["gateway"] or r["oif"] != "lo"] == [], res
    for label in ("raw4", "raw6", "packet"):
        assert res[label]["ok"] is False and res[label]["errno"] == errno.EPERM, (label, res[label])
