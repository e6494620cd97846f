"""The sandbox from inside, on every backend (the ``backend`` fixture): filesystem, network,
exit status, descriptors, timeouts. Each claim has a live control that succeeds where allowed."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

import pysandbox
from tests.support import processes_with, python_in_sandbox

PY = python_in_sandbox()


@pytest.fixture
def wd(tmp_path):
    path = tmp_path / "wd"
    path.mkdir()
    return path


@pytest.fixture
def host_dir():
    """A host directory outside /tmp (the sandbox gets a private /tmp) that the test user owns."""
    path = tempfile.mkdtemp(prefix="pysandbox-test-", dir="/var/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sandboxed(backend, argv, policy, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 120)
    return pysandbox.run(argv, policy=policy, backend=backend, **kwargs)


def python(backend, code, policy, *args, **kwargs):
    return sandboxed(backend, [PY, "-c", code, *map(str, args)], policy, **kwargs)


WRITE = """
import sys
try:
    with open(sys.argv[1], "w") as f:
        f.write(sys.argv[2])
except OSError as exc:
    print(exc.errno)
    sys.exit(3)
print("wrote")
"""


# ---------------------------------------------------------------- filesystem

def test_root_is_read_only(backend, wd, host_dir):
    target = os.path.join(host_dir, "file")
    with open(target, "w") as f:
        f.write("original")
    policy = pysandbox.Policy.default(workdir=str(wd))
    done = python(backend, WRITE, policy, target, "changed")
    assert (done.returncode, done.stdout.strip()) == (3, str(errno.EROFS)), done.stderr
    with open(target) as f:
        assert f.read() == "original"
    etc_name = f"/etc/pysandbox-test-{uuid.uuid4().hex}"
    done = python(backend, WRITE, policy, etc_name, "x")
    assert done.returncode == 3, done.stderr
    assert not os.path.exists(etc_name)
    # control: the same write through a read-write bind succeeds and reaches the host
    done = python(backend, WRITE, pysandbox.Policy.default(workdir=str(wd), rw=[host_dir]), target, "changed")
    assert (done.returncode, done.stdout.strip()) == (0, "wrote"), done.stderr
    with open(target) as f:
        assert f.read() == "changed"


def test_workdir_is_writable_and_visible_on_host(backend, wd):
    policy = pysandbox.Policy.default(workdir=str(wd))
    done = sandboxed(backend, ["sh", "-c", 'echo "made inside" > out.txt && pwd'], policy)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(wd)
    assert (wd / "out.txt").read_text() == "made inside\n"


def test_extra_ro_bind_is_read_only(backend, wd, host_dir):
    target = os.path.join(host_dir, "file")
    with open(target, "w") as f:
        f.write("original")
    done = python(backend, WRITE + "\n", pysandbox.Policy.default(workdir=str(wd), ro=[host_dir]), target, "x")
    assert (done.returncode, done.stdout.strip()) == (3, str(errno.EROFS)), done.stderr
    check = python(backend, "import sys; print(open(sys.argv[1]).read())",
                   pysandbox.Policy.default(workdir=str(wd), ro=[host_dir]), target)
    assert check.stdout.strip() == "original"   # control: the bind is there and readable


def test_private_tmp(backend, wd):
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="pysandbox-host-") as host_file:
        inside_name = f"/tmp/pysandbox-inside-{uuid.uuid4().hex}"
        code = ("import os, sys\n"
                "print(os.path.exists(sys.argv[1]))\n"
                "open(sys.argv[2], 'w').write('x')\n"
                "print(open(sys.argv[2]).read())\n")
        done = python(backend, code, pysandbox.Policy.default(workdir=str(wd)), host_file.name, inside_name)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["False", "x"]     # host file invisible; /tmp writable inside
        assert os.path.exists(host_file.name)             # control: it exists on the host
        assert not os.path.exists(inside_name)            # nothing leaked out


def test_hide_covers_a_path(backend, wd, host_dir):
    secret = os.path.join(host_dir, "secret")
    with open(secret, "w") as f:
        f.write("s3cret")
    code = "import sys\ntry:\n print(open(sys.argv[1]).read())\nexcept OSError as e:\n print('err', e.errno)"
    shown = python(backend, code, pysandbox.Policy.default(workdir=str(wd)), secret)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "s3cret"    # control: readable without --hide
    hidden = python(backend, code, pysandbox.Policy.default(workdir=str(wd), hide=[secret]), secret)
    # The command ran to its end (an empty stdout is the hidden empty node, not a crash).
    assert hidden.returncode == 0, hidden.stderr
    assert hidden.stdout.strip() in (f"err {errno.EACCES}", ""), hidden.stdout
    assert "s3cret" not in hidden.stdout


# ---------------------------------------------------------------- network

LINKS = """
import json, os
from pyroute2 import IPRoute
with IPRoute() as ip:
    links = [(l.get_attr("IFLA_IFNAME"), bool(l["flags"] & 1)) for l in ip.get_links()]
print(json.dumps({"links": links, "netns": os.stat("/proc/self/ns/net").st_ino}))
"""


@pytest.mark.requires("pyroute2")
def test_deny_shows_only_lo_up(backend, wd):
    deny = python(backend, LINKS, pysandbox.Policy.default(workdir=str(wd), network="deny"))
    assert deny.returncode == 0, deny.stderr
    got = json.loads(deny.stdout)
    assert got["links"] == [["lo", True]]
    assert got["netns"] != os.stat("/proc/self/ns/net").st_ino
    # control: in allow mode the same script sees the host's namespace and links
    allow = python(backend, LINKS, pysandbox.Policy.default(workdir=str(wd), network="allow"))
    assert allow.returncode == 0, allow.stderr
    got = json.loads(allow.stdout)
    assert got["netns"] == os.stat("/proc/self/ns/net").st_ino
    from pyroute2 import IPRoute
    with IPRoute() as ip:
        host_links = [l.get_attr("IFLA_IFNAME") for l in ip.get_links()]
    assert [name for name, _ in got["links"]] == host_links


class Listener:
    """A loopback TCP server that greets each client; bounded, stopped by the test."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.token = uuid.uuid4().hex
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        deadline = time.monotonic() + 300
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            with conn:
                conn.sendall(self.token.encode() + b"\n")

    def alive(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as c:
            return c.makefile().readline().strip() == self.token

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


CONNECT = """
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as c:
        print(c.makefile().readline().strip())
except OSError as exc:
    print("error", exc.errno)
"""


def test_allow_reaches_host_loopback_listener(backend, wd, listener):
    assert listener.alive()
    done = python(backend, CONNECT, pysandbox.Policy.default(workdir=str(wd), network="allow"), listener.port)
    assert done.stdout.strip() == listener.token, done.stderr
    assert listener.alive()


def test_deny_cannot_reach_host_loopback_listener(backend, wd, listener):
    assert listener.alive()
    done = python(backend, CONNECT, pysandbox.Policy.default(workdir=str(wd), network="deny"), listener.port)
    assert done.stdout.strip() == f"error {errno.ECONNREFUSED}", done.stderr
    assert listener.alive()


# ---------------------------------------------------------------- exit status, descriptors

def test_exit_status_passes_through(backend, wd):
    assert sandboxed(backend, ["sh", "-c", "exit 7"], pysandbox.Policy.default(workdir=str(wd))).returncode == 7
    assert sandboxed(backend, ["true"], pysandbox.Policy.default(workdir=str(wd))).returncode == 0


def test_signal_death(backend, wd):
    done = sandboxed(backend, ["sh", "-c", "kill -TERM $$"], pysandbox.Policy.default(workdir=str(wd)))
    # both report a signal like subprocess (-N): the init's status report carries it
    assert done.returncode == -15


def test_missing_and_non_executable_commands(backend, wd):
    policy = pysandbox.Policy.default(workdir=str(wd))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}   # every entry searchable (see test_cli for others)
    with pytest.raises(FileNotFoundError):
        sandboxed(backend, [f"no-such-command-{uuid.uuid4().hex}"], policy, env=env)
    (wd / "script").write_text("#!/bin/sh\necho ran\n")
    with pytest.raises(PermissionError):
        sandboxed(backend, ["./script"], policy)
    (wd / "script").chmod(0o755)   # control
    assert sandboxed(backend, ["./script"], policy).stdout == "ran\n"


FDS = """
import json, os
fds = {}
for name in os.listdir("/proc/self/fd"):
    try:
        fds[int(name)] = os.readlink("/proc/self/fd/" + name)
    except OSError:
        pass   # the descriptor listdir used, closed by now
print(json.dumps(fds))
"""


def test_only_stdio_and_pass_fds_reach_the_command(backend, wd):
    leak_r, leak_w = os.pipe()
    pass_r, pass_w = os.pipe()
    try:
        os.set_inheritable(leak_r, True)
        os.set_inheritable(leak_w, True)
        policy = pysandbox.Policy.default(workdir=str(wd))
        done = python(backend, FDS, policy)
        assert done.returncode == 0, done.stderr
        assert sorted(map(int, json.loads(done.stdout))) == [0, 1, 2]
        done = python(backend, FDS, policy, pass_fds=(pass_r,))
        got = {int(k): v for k, v in json.loads(done.stdout).items()}
        assert sorted(got) == [0, 1, 2, pass_r]
        assert got[pass_r] == os.readlink(f"/proc/self/fd/{pass_r}")
    finally:
        for fd in (leak_r, leak_w, pass_r, pass_w):
            os.close(fd)


def test_environment_operations(backend, wd):
    env = pysandbox.Env(unset=("PYSANDBOX_T_UNSET",), set=(("PYSANDBOX_T_SET", "v"),))
    policy = pysandbox.Policy.default(workdir=str(wd), env=env)
    code = "import os; print(os.environ.get('PYSANDBOX_T_SET'), os.environ.get('PYSANDBOX_T_UNSET'))"
    done = python(backend, code, policy, env={**os.environ, "PYSANDBOX_T_UNSET": "gone"})
    assert done.stdout.split() == ["v", "None"]


# ---------------------------------------------------------------- timeout

def _processes_with(token: str) -> list[int]:
    return [pid for pid, _ in processes_with(token)]


def test_timeout_kills_grandchildren(backend, wd):
    token = f"3{uuid.uuid4().int % 10**6:06d}.5"   # an argument only our sleeps have
    script = f"sh -c 'sleep {token}' & sleep {token} & wait"
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(len(_processes_with("sleep\0" + token)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            sandboxed(backend, ["sh", "-c", script], pysandbox.Policy.default(workdir=str(wd)), timeout=5)
    finally:
        stop.set()
        watcher.join(10)
    assert max(seen, default=0) == 2     # control: both sleeps were running
    for _ in range(200):                 # bounded: up to ~20 s for the kernel to reap
        left = _processes_with("sleep\0" + token)
        if not left:
            break
        time.sleep(0.1)
    assert left == []
