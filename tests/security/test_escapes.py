"""Deny mode holds for every descendant, against namespace tricks, and for inherited
descriptors; nothing of the sandbox survives it."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import uuid

import pytest

import pysandbox
from tests.security import oracles
from tests.support import wait_until

pytestmark = pytest.mark.requires("userns")

AGENT = r'''
import json, os, socket, subprocess, sys, time
role, marker, port, wd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
me = os.path.abspath(__file__) if "__file__" in globals() else sys.argv[0]
def attempt():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"INTRUDER " + role.encode() + b"\n")
        return {"syscall": "connect", "errno": 0}
    except OSError as exc:
        return {"syscall": "connect", "errno": exc.errno}
    finally:
        s.close()
def report(res):
    tmp = os.path.join(wd, f"{marker}-{role}.tmp")
    with open(tmp, "w") as f:
        json.dump(dict(res, role=role, sandbox_pid=os.getpid()), f)
    os.rename(tmp, os.path.join(wd, f"{marker}-{role}.json"))
def spawn(r):
    return subprocess.Popen([sys.executable, "-I", me, r, marker, str(port), wd])
if role == "main":
    spawn("child")
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.execv(sys.executable, [sys.executable, "-I", me, "detached", marker, str(port), wd])
    os.waitpid(pid, 0)
    report(attempt())
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(wd, "go")) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(0)
elif role == "child":
    spawn("grandchild")
    report(attempt())
elif role == "grandchild":
    report(attempt())
elif role == "detached":
    time.sleep(0.5)
    report(attempt())
time.sleep(600)
'''

ROLES = ("main", "child", "grandchild", "detached")


def test_descendants_stay_blocked_and_die_with_the_sandbox(backend, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(AGENT)
    marker = "psbmark" + uuid.uuid4().hex
    policy = pysandbox.Policy.default(workdir=work, network="deny")
    with oracles.tcp4() as lst:
        lst.round_trip()
        proc = pysandbox.Popen([sys.executable, "-I", str(work / "agent.py"), "main", marker, str(lst.port), str(work)],
                               policy=policy, backend=backend, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            reported = wait_until(lambda: all((work / f"{marker}-{r}.json").exists() for r in ROLES), 60)
            assert reported, (sorted(p.name for p in work.iterdir()), proc.poll())
            # control: the host sees every descendant by its argv marker while the sandbox runs
            alive = oracles.host_pids_with(marker)
            assert len(alive) >= len(ROLES), alive
            (work / "go").write_text("")
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            proc.stdout.close()
            proc.stderr.close()
        lst.round_trip()
    for role in ROLES:
        res = json.loads((work / f"{marker}-{role}.json").read_text())
        assert res["errno"] == errno.ECONNREFUSED, res
        assert res["sandbox_pid"] not in alive   # pids in the sandbox are not host pids
    assert lst.foreign == []
    gone = wait_until(lambda: oracles.host_pids_with(marker) == [], 10)
    assert gone, f"sandbox processes survived: {oracles.host_pids_with(marker)}"


NS_SCRIPT = oracles.PRELUDE + r'''
import ctypes, subprocess
SHOW = "cat /proc/net/dev; echo ROUTES; tail -n +2 /proc/net/route; echo ROUTES6; cat /proc/net/ipv6_route"
def parse(text):
    dev, _, rest = text.partition("ROUTES\n")
    routes4, _, routes6 = rest.partition("ROUTES6\n")
    ifaces = sorted(l.split(":")[0].strip() for l in dev.splitlines()[2:] if ":" in l)
    v4 = [l.split()[0] for l in routes4.splitlines() if l.strip()]
    v6 = sorted({l.split()[-1] for l in routes6.splitlines() if l.strip()})
    return {"ifaces": ifaces, "route_ifaces": sorted(set(v4) | set(v6))}
for label, argv in (("plain", ["sh", "-c", SHOW]),
                    ("unshare -n", ["unshare", "-n", "sh", "-c", SHOW]),
                    ("unshare -Urn", ["unshare", "-Urn", "sh", "-c", SHOW]),
                    ("nsenter -t 1 -n", ["nsenter", "-t", "1", "-n", "sh", "-c", SHOW])):
    done_ = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    RESULTS[label] = dict(parse(done_.stdout) if done_.returncode == 0 else {}, rc=done_.returncode,
                          stderr=done_.stderr.strip()[-200:])
libc = ctypes.CDLL(None, use_errno=True)
setns = {}
for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    try:
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except OSError as exc:
        setns[pid] = {"open_errno": exc.errno}
        continue
    ret = libc.setns(fd, 0x40000000)
    err = ctypes.get_errno() if ret != 0 else 0
    os.close(fd)
    with open("/proc/thread-self/net/dev") as f:
        ifaces = sorted(l.split(":")[0].strip() for l in f.read().splitlines()[2:] if ":" in l)
    setns[pid] = {"errno": err, "ifaces": ifaces}
RESULTS["setns"] = setns
done()
'''


def test_namespace_tricks_find_no_host_interface(backend, tmp_path):
    host_ifaces = {name for _, name in socket.if_nameindex()} - {"lo"}
    policy = pysandbox.Policy.default(workdir=tmp_path, network="deny")
    allow = oracles.run_probe(NS_SCRIPT, policy.replace(network=pysandbox.Network("allow")), backend)
    # control: the parser sees the host's interfaces and routes when they are there
    assert set(allow["plain"]["ifaces"]) >= host_ifaces and allow["plain"]["route_ifaces"], allow["plain"]
    res = oracles.run_probe(NS_SCRIPT, policy, backend)
    assert res["plain"]["ifaces"] == ["lo"] and set(res["plain"]["route_ifaces"]) <= {"lo"}, res["plain"]
    for label in ("unshare -n", "unshare -Urn", "nsenter -t 1 -n"):
        got = res[label]
        assert got["rc"] not in (126, 127), (label, got)   # the tool ran: the attempt was made
        if got["rc"] == 0:
            assert not set(got["ifaces"]) & host_ifaces and set(got["route_ifaces"]) <= {"lo"}, (label, got)
        else:
            assert got["stderr"], (label, got)
    assert res["setns"], "no /proc/*/ns/net visible at all"
    for pid, got in res["setns"].items():
        assert not set(got.get("ifaces", ())) & host_ifaces, (pid, got)
        assert set(got.get("ifaces", ["lo"])) <= {"lo"}, (pid, got)


INHERIT_SCRIPT = oracles.PRELUDE + r'''
import stat
fd = int(sys.argv[1])
step("write")
attempt("write", lambda: os.write(fd, b"INTRUDER\n"))
sockets = []
for name in os.listdir("/proc/self/fd"):
    try:
        if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
            sockets.append(int(name))
    except OSError:
        pass
RESULTS["socket_fds"] = sorted(sockets)
done()
'''


def _conn_round_trip(client, server):
    nonce = uuid.uuid4().hex.encode()
    client.sendall(nonce)
    server.settimeout(5)
    assert server.recv(64) == nonce, "the inherited connection is not alive"


def _pending(server) -> bytes:
    server.setblocking(False)
    try:
        return server.recv(4096)
    except BlockingIOError:
        return b""
    finally:
        server.setblocking(True)


@pytest.mark.parametrize("passed", [False, True])
def test_inherited_host_socket_does_not_reach_the_command(backend, tmp_path, passed):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    client = socket.create_connection(srv.getsockname())
    server, _ = srv.accept()
    try:
        os.set_inheritable(client.fileno(), True)   # no CLOEXEC: a careless caller
        _conn_round_trip(client, server)
        res = oracles.run_probe(INHERIT_SCRIPT, pysandbox.Policy.default(workdir=tmp_path, network="deny"), backend,
                                (client.fileno(),), pass_fds=(client.fileno(),) if passed else ())
        got = _pending(server)
        _conn_round_trip(client, server)
        if passed:   # control: passed explicitly, the very same descriptor does reach it
            assert res["write"]["ok"] and got == b"INTRUDER\n", (res, got)
        else:
            assert res["write"] == {"ok": False, "errno": errno.EBADF, "errname": "EBADF", "syscall": "write"}, res
            assert res["socket_fds"] == [], res
            assert got == b""
    finally:
        for s in (client, server, srv):
            s.close()
