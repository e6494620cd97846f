"""A session's Landlock descriptors (native/psb_session.c, native/psb_landlock.h
``psb_landlock_keep``/``psb_landlock_kept``; docs/ARCHITECTURE.md, "Sessions").

The server opens "/" and each writable destination once, before any command runs, as
O_PATH descriptors checked then (the root of a writable mount), and each command builds
its filesystem domain from them with no path walk. Attacked from a command:

1. The descriptors are the server's alone: the command holds none (its /proc/self/fd,
   by inode), its keeper holds none, and the server's cannot be followed from the
   command through /proc/1/fd/N. Live controls: the test (outside, the owner) sees them
   in the server, O_PATH, on "/" and the workdir; a workdir descriptor the command is
   given is found by the same inode check; the command follows its own /proc/self/fd/0.
2. A command that moves a destination's writable parent and plants a symlink in its
   place: the next command's rules are still on the mount's root (a mount root cannot be
   renamed: EBUSY), so it runs, writes through the moved mount, and a read-only stdin is
   still not reopened for writing. (Before, each command walked the names, and this made
   every later command fail closed.) Live control: the same session without Landlock
   (``PYSANDBOX_NO_LANDLOCK=1``) reopens stdin and writes the caller's file.
3. Fail closed: a destination that is no mount's root when the server checks it stops
   the server (ERROR 4); the session does not start. Live control: its own list starts.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import subprocess

import pytest

import pysandbox
from pysandbox.backends import landlock
from pysandbox.errors import SessionError
from pysandbox.session import Sandbox
from tests.support import host_capability, need, python_in_sandbox
from tests.support.nsholder import children

pytestmark = pytest.mark.requires("userns")

O_PATH = 0o10000000
MAX_FD = 256   # the descriptor numbers looked at in the server and the keeper

# argv: the server's kept descriptor numbers (comma-separated), then their "dev:ino".
# Prints what it holds and reaches, then waits for its stdin to end.
PROBE = r'''
import errno, json, os, sys
kept = set(sys.argv[2:])
def reach(path):
    try:
        os.close(os.open(path, os.O_PATH))
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out = {"fds": [], "held": [], "server": {}, "keeper": {}, "own": reach("/proc/self/fd/0")}
for n in os.listdir("/proc/self/fd"):
    try:
        st = os.fstat(int(n))
    except OSError:
        continue   # the listing's own, closed by now
    out["fds"].append(int(n))
    if f"{st.st_dev}:{st.st_ino}" in kept:
        out["held"].append(int(n))
for n in sys.argv[1].split(","):
    out["server"][n] = reach(f"/proc/1/fd/{n}")
    out["keeper"][n] = reach(f"/proc/{os.getppid()}/fd/{n}")
print(json.dumps(out), flush=True)
sys.stdin.read()
'''


def _need_landlock_fs():
    why = host_capability("landlock")
    if why is not None:
        need("landlock", why)


def _nspid(pid: int) -> list[str]:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return line.split()[1:]
    return []


def _server_pid(sb) -> int:
    """The host pid of the session's server: the pid 1 of its pid namespace at or below
    the launched process (bwrap's child on the bwrap backend)."""
    todo = [sb._server.pid]
    while todo:
        pid = todo.pop()
        if _nspid(pid)[-1:] == ["1"] and len(_nspid(pid)) > 1:
            return pid
        todo += children(pid)
    raise AssertionError("no session server found below the launch")


def _opath_fds(pid: int) -> dict:
    """``pid``'s O_PATH descriptors: number -> "dev:ino" of what each names. Taken with
    pidfd_getfd (the test, outside, may: root, or the owner of the sandbox's user
    namespace; /proc/PID/fd of an undumpable process is root's alone)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out = {}
    pidfd = os.pidfd_open(pid)
    try:
        for n in range(MAX_FD):
            fd = libc.syscall(438, pidfd, n, 0)   # pidfd_getfd
            if fd < 0:
                assert ctypes.get_errno() == errno.EBADF, (pid, n, os.strerror(ctypes.get_errno()))
                continue
            try:
                if fcntl.fcntl(fd, fcntl.F_GETFL) & O_PATH:
                    st = os.fstat(fd)
                    out[n] = f"{st.st_dev}:{st.st_ino}"
            finally:
                os.close(fd)
    finally:
        os.close(pidfd)
    return out


def _ident(path) -> str:
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def test_the_kept_descriptors_are_the_servers_alone(backend, tmp_path):
    _need_landlock_fs()
    if landlock.kind(False) not in (landlock.FS, landlock.SIGNAL_FS):
        pytest.skip("no filesystem domain here: the server keeps no descriptor")
    with Sandbox(pysandbox.Policy.default(workdir=str(tmp_path)), backend) as sb:
        server = _server_pid(sb)
        kept = _opath_fds(server)
        # live control: the test, outside, sees them: "/" and the workdir among them
        assert {_ident("/"), _ident(tmp_path)} <= set(kept.values()), kept
        nums = ",".join(str(n) for n in sorted(kept))
        # live control of the inode check: a descriptor of the workdir it is given is seen
        given = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            proc = sb.Popen([python_in_sandbox(), "-c", PROBE, nums, *kept.values()], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(given,))
        finally:
            os.close(given)
        try:
            seen = json.loads(proc.stdout.readline() or "null")
            keepers = [k for k in children(server) if any(_nspid(c)[-1:] == [str(proc.pid)] for c in children(k))]
            assert len(keepers) == 1, (keepers, children(server))
            keeper_kept = _opath_fds(keepers[0])
        finally:
            _, err = proc.communicate(b"", timeout=60)
    assert proc.returncode == 0 and seen is not None, err
    assert seen["own"] == "ok", seen                       # live control: its own magic links work
    assert seen["held"] == [given] and sorted(seen["fds"]) == [0, 1, 2, given], seen   # no kept one
    assert keeper_kept == {}, keeper_kept                  # the keeper closed its copies
    assert set(seen["server"].values()) <= {"EACCES", "EPERM"}, seen
    assert set(seen["keeper"].values()) <= {"EACCES", "EPERM", "ENOENT"}, seen


SWAP = "mv /tmp/p /tmp/q && ln -s /tmp/q /tmp/p"
RENAME_ROOT = "import errno, os\ntry:\n    os.rename('/tmp/q/x', '/tmp/r')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])"
AFTER = ("echo ran > /tmp/q/x/ran && cat /tmp/p/x/ran || exit 3; "
         "if (echo pwned >> /dev/stdin) 2>/dev/null; then echo reopened; else echo refused; fi")


@pytest.mark.parametrize("control", [False, True])
def test_a_command_that_moves_a_destination_leaves_the_rules_on_its_mount(backend, tmp_path, monkeypatch, control):
    _need_landlock_fs()
    if control:
        monkeypatch.setenv(landlock.NO_LANDLOCK_ENV, "1")
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"     # outside every writable mount of the policy
    victim.write_bytes(b"the caller's file\n")
    policy = pysandbox.Policy.default(workdir=str(work), tmpfs=["/tmp/p/x"])
    with Sandbox(policy, backend) as sb:
        done = sb.run(["sh", "-c", "echo ok > /tmp/p/x/f && cat /tmp/p/x/f"], capture_output=True, timeout=120)
        assert (done.returncode, done.stdout) == (0, b"ok\n"), done.stderr
        done = sb.run(["sh", "-c", SWAP], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        # what keeps the rule meaningful: the mount's root itself cannot be moved
        done = sb.run([python_in_sandbox(), "-c", RENAME_ROOT], capture_output=True, timeout=120)
        assert done.stdout == b"EBUSY\n", (done.stdout, done.stderr)
        with open(victim, "rb") as stdin:
            done = sb.run(["sh", "-c", AFTER], stdin=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if control:
        assert done.stdout.split() == [b"ran", b"reopened"]
        assert victim.read_bytes() == b"the caller's file\npwned\n"
    else:
        assert done.stdout.split() == [b"ran", b"refused"]
        assert victim.read_bytes() == b"the caller's file\n"


def test_a_destination_that_is_no_writable_mounts_root_stops_the_server(backend, tmp_path, monkeypatch):
    """Fail closed: the server checks each destination once, before any command runs;
    one that is no mount's root (here /etc, a directory of the read-only root: a rule
    there would cover the host's /etc reached any way) stops it (ERROR 4) and the session
    does not start. Live control: the same policy with its own list starts and runs."""
    _need_landlock_fs()
    if landlock.kind(False) not in (landlock.FS, landlock.SIGNAL_FS):
        pytest.skip("no filesystem domain here: the server checks no destination")
    policy = pysandbox.Policy.default(workdir=str(tmp_path))
    with Sandbox(policy, backend) as sb:
        assert sb.run(["true"], timeout=120).returncode == 0
    real = landlock.writable_destinations
    monkeypatch.setattr(landlock, "writable_destinations", lambda ops: real(ops) + ("/etc",))
    with pytest.raises(SessionError) as info:
        Sandbox(policy, backend)
    assert "not a writable mount's root" in str(info.value)


def test_the_server_has_no_launch_domain_each_command_writes_the_stdout_it_is_sent(backend, tmp_path):
    """A session's server is launched as_pid_1, a plan that otherwise takes the filesystem
    domain alone at launch; the server must not (Plan.launch_domain): each command's domain
    would nest in it (Landlock intersects), and a stdout file sent with a command has no
    rule in the server's. A file outside the policy's writable paths, given as stdout, is
    reopened for writing through /dev/stdout; stdin given read-only is still refused (the
    command's own domain, live). Fails when the server takes a launch-time domain."""
    _need_landlock_fs()
    out, src = tmp_path / "out", tmp_path / "in"
    src.write_text("keep\n")
    with Sandbox(pysandbox.Policy.default(), backend) as sb, open(out, "ab") as fout, open(src, "rb") as fin:
        done = sb.run(["sh", "-c", "echo hi >> /dev/stdout || exit 3; (echo pwned > /dev/stdin) 2>/dev/null && exit 4; "
                       "exit 0"], stdin=fin, stdout=fout, stderr=subprocess.PIPE)
    assert (done.returncode, out.read_text()) == (0, "hi\n"), done.stderr   # 3: stdout refused; 4: stdin reopened
    assert src.read_text() == "keep\n"
