"""A proxy-mode command against its launcher's descriptors, on both backends, one-shot and
as a command of a session (the session's one engine has the same bound).

The egress proxy runs in the launcher's process (pysandbox/egress.py). A command that
opens hundreds of tunnels through it and leaves them idle must not take the launcher's
last descriptors: the launcher, a child Python with a soft RLIMIT_NOFILE of 256 here,
must still open files and launch another sandbox, its descriptor table must stay under
the budget of pysandbox/proxy/budget.py, and its stderr must stay a few lines. The
live controls: the flood really fills the budget (the launcher's table reaches it, a
new request meanwhile waits), and connections under the budget, before and after the
flood, are served.

Traffic: the sandbox's loopback (the proxy's listener) and, from the proxy, a sink on
the host's 127.0.0.1 that the test opens and lists by address; it never accepts, so
every tunnel to it stays open and idle.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from pysandbox.proxy.budget import reserve_for
from tests.support import python_in_sandbox

pytestmark = pytest.mark.requires("userns")

SOFT = 256
FLOOD = 600

# Runs inside the sandbox: 10 requests served (control), FLOOD tunnels opened and left
# idle, then, told to, a probe that must wait, the flood closed, the probe served.
COMMAND = textwrap.dedent(r'''
    import base64, os, resource, socket, sys, urllib.parse
    u = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])   # a session's command: its credential
    AUTH = b"Proxy-Authorization: Basic %s\r\n" % base64.b64encode(f"{u.username}:{u.password}".encode()) \
        if u.username else b""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sink, flood = sys.argv[1], int(sys.argv[2])
    PROXY = ("127.0.0.1", 3128)
    def refused():
        s = socket.create_connection(PROXY, timeout=30)
        s.sendall(b"CONNECT refused.test:443 HTTP/1.1\r\n%s\r\n" % AUTH)
        return s
    before = [refused().recv(12) for _ in range(10)]
    print("before", sum(b == b"HTTP/1.1 403" for b in before), flush=True)
    idle = []
    for _ in range(flood):
        s = socket.create_connection(PROXY, timeout=30)
        s.sendall(b"CONNECT %s HTTP/1.1\r\n%s\r\n" % (sink.encode(), AUTH))
        idle.append(s)
    print("ready", len(idle), flush=True)
    sys.stdin.readline()
    probe = refused()
    probe.settimeout(1.0)
    try:
        print("during", probe.recv(12).decode(), flush=True)
    except TimeoutError:
        print("during waiting", flush=True)
    for s in idle:
        s.close()
    probe.settimeout(60)
    print("after", probe.recv(12).decode(), flush=True)
''')

# The launcher: lowers its own limit, runs COMMAND in proxy mode, and once the flood is
# in, reports its descriptors, opens files and launches two more sandboxes.
LAUNCHER = textwrap.dedent(r'''
    import json, os, resource, sys, time
    soft = int(sys.argv[1])
    import pysandbox
    backend, work, sink, flood, python, command, mode = sys.argv[2:9]
    session = None
    if mode == "session":
        # started under the usual limit: the session's server places a command's
        # descriptors at 900 and up (native/psb_session.c HIGH_FD), which a soft limit
        # of 256 refuses (EBADF); the engine's budget is measured again below
        session = pysandbox.Sandbox(pysandbox.Policy.default(workdir=work, network=pysandbox.Network(
            "proxy", (sink,), head_timeout=120, idle_timeout=15)), backend=backend)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    # idle_timeout: a tunnel whose client closed lasts until its upstream ends too (the
    # sink never does) or the idle timeout: 15 s, to see the budget free again
    policy = pysandbox.Policy.default(workdir=work, network=pysandbox.Network(
        "proxy", (sink,), head_timeout=120, idle_timeout=15))
    def fds():
        return len(os.listdir("/proc/self/fd")) - 1
    report = {"start": fds()}
    argv = [python, "-I", "-c", command, sink, flood]
    if session is not None:    # the session's one engine, serving one of its commands
        proc = session.Popen(argv, stdin=pysandbox.PIPE, stdout=pysandbox.PIPE, text=True)
        from pysandbox.proxy import budget
        budget.POOL.measure()    # with the pipes, as an engine measures at its start (its own connections are not "others")
        engine = session.proxy._engine
    else:
        proc = pysandbox.Popen(argv, policy=policy, backend=backend, stdin=pysandbox.PIPE, stdout=pysandbox.PIPE,
                               text=True)
        engine = proc.proxy._engine
    report["before"] = proc.stdout.readline().split()
    report["ready"] = proc.stdout.readline().split()
    # the tunnels the budget admits open one by one: wait until the table stops growing
    last, stable = -1, 0
    while stable < 10:
        time.sleep(0.2)
        now = fds()
        stable = stable + 1 if now == last else 0
        last = now
    report["flooded"] = fds()
    from pysandbox.proxy import budget
    report["budget"] = engine.budget
    report["pool"] = [budget.POOL.soft, budget.POOL.reserve, budget.POOL.others]
    files = []
    for i in range(20):
        files.append(open(os.path.join(work, f"f{i}"), "w"))
    for f in files:
        f.close()
    report["files"] = len(files)
    report["second"] = pysandbox.run(["true"], policy=pysandbox.Policy.default(workdir=work),
                                     backend=backend).returncode
    report["second_proxy"] = pysandbox.run(["true"], policy=pysandbox.Policy.default(
        workdir=work, network="proxy"), backend=backend).returncode
    out, _ = proc.communicate("go\n", timeout=120)
    report["rest"] = out.splitlines()
    report["returncode"] = proc.returncode
    events = proc.proxy.events
    if mode == "session":    # too_many_connections is the engine's, before any credential is read
        events += session.proxy.events
        session.close()
    report["reasons"] = sorted({e.reason for e in events})
    report["end"] = fds()
    print("REPORT " + json.dumps(report))
''')


@pytest.fixture
def sink():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4096)          # never accepted: each tunnel to it stays open, idle
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.mark.parametrize("mode", ["oneshot", "session"])
def test_idle_tunnels_cannot_take_the_launchers_descriptors(backend, tmp_path, sink, mode):
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(SOFT), backend, str(work), sink, str(FLOOD),
                           python_in_sandbox(), COMMAND, mode], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines and lines[-1].startswith("REPORT "), (done.stdout, done.stderr[-3000:])
    report = json.loads(lines[-1][len("REPORT "):])
    keep = reserve_for(SOFT)
    soft, reserve, others = report["pool"]
    assert (soft, reserve) == (SOFT, keep)
    assert report["budget"] == (SOFT - keep - others) // 2 < FLOOD // 2, report
    # control: under the budget every connection is served, and the whole flood got in
    assert report["before"] == ["before", "10"] and report["ready"] == ["ready", str(FLOOD)], report
    # the flood filled the budget (two descriptors a tunnel) and no further
    assert report["flooded"] <= SOFT - keep, report
    assert report["flooded"] >= report["start"] + 2 * report["budget"] - 10, report
    # ... and the launcher carries on: files, another sandbox, another proxy-mode sandbox
    assert report["files"] == 20 and report["second"] == 0 and report["second_proxy"] == 0, report
    # the budget was really reached (a new request waited), and once the flood closed,
    # the request waiting was served
    assert report["rest"] == ["during waiting", "after HTTP/1.1 403"], report
    assert report["returncode"] == 0
    assert "too_many_connections" in report["reasons"] and "ok" in report["reasons"], report
    assert report["end"] <= report["start"] + 2, report
    # the launcher's stderr: a few lines, whatever the command did
    assert len(done.stderr.splitlines()) <= 40, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


IDLE = textwrap.dedent(r'''
    import socket, sys, time
    PROXY = ("127.0.0.1", 3128)
    target = sys.argv[1].encode()
    def tunnel():
        s = socket.create_connection(PROXY, timeout=30)
        s.sendall(b"CONNECT %s HTTP/1.1\r\n\r\n" % target)
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
        return s
    def closed_after(s):
        began = time.monotonic()
        s.settimeout(30)
        data = b""
        while chunk := s.recv(100):
            data += chunk
        return data.split(b"\r\n")[0].decode() or "eof", round(time.monotonic() - began, 1)
    silent = socket.create_connection(PROXY, timeout=30)
    idle, active = tunnel(), tunnel()
    got = b""
    for i in range(10):                       # three idle timeouts of traffic
        active.sendall(b"%d" % i)
        got += active.recv(1)
        time.sleep(0.3)
    print("silent", *closed_after(silent))
    print("idle", *closed_after(idle))
    active.sendall(b"!")
    print("active", (got + active.recv(1)).decode())
''')


def test_the_policys_timeouts_close_silent_and_idle_connections(backend, tmp_path):
    # Network(head_timeout=1, idle_timeout=1): a connection that never sends a request
    # gets 408 and is closed, an idle tunnel is closed; the control, a tunnel with a byte
    # every 0.3 s for 3 s, lives on.
    from tests.support.loopback import LoopbackServer
    echo = LoopbackServer()
    try:
        target = f"127.0.0.1:{echo.port}"
        work = tmp_path / "work"
        work.mkdir()
        import pysandbox
        policy = pysandbox.Policy.default(workdir=work, network=pysandbox.Network(
            "proxy", (target,), head_timeout=1, idle_timeout=1))
        done = pysandbox.run([python_in_sandbox(), "-I", "-c", IDLE, target], policy=policy, backend=backend,
                             capture_output=True, text=True, timeout=120)
    finally:
        echo.close()
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert rows["silent"][:3] == ["HTTP/1.1", "408", "Request"], rows      # closed by the head timeout
    assert rows["idle"][0] == "eof" and float(rows["idle"][1]) < 5, rows
    assert rows["active"] == ["0123456789!"], rows
    assert [e.reason for e in done.proxy.events].count("timeout") == 1
