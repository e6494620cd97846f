"""What the command's Landlock domain relies on, asked of the kernel directly (no sandbox;
native/psb_landlock.h, pysandbox/backends/landlock.py).

A domain that handles no access right and only scopes signals (Landlock ABI 6):
  (a) still refuses every ptrace-class access from inside to a process outside it:
      ptrace, /proc/PID/{environ,mem,ns/*,fd/*}, pidfd_getfd, process_vm_readv (and
      signals, its scope); live control: the same process, before it enters the domain,
      and its own child, inside;
  (b) leaves mounting alone: unshare(CLONE_NEWUSER|CLONE_NEWNS), mount, pivot_root and a
      nested user namespace work inside; control: a domain that handles a filesystem
      right (the FS kind) refuses the mount and pivot_root.
The attacker is the test's own user (root, or not) in a user namespace of its own, with
every capability there (as a sandboxed command may hold); the target, in the init's
place, is its fork made before it entered the domain: same user namespace, dumpable.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import host_capability, need

pytestmark = pytest.mark.requires("userns")

# argv: KIND (0 none, 1 fs, 2 signal scope), a directory to mount on.
PROBE = r'''
import ctypes, json, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
kind, where = int(sys.argv[1]), sys.argv[2]
out = {}
def attempt(label, fn):
    try:
        fn()
        out[label] = "ok"
    except OSError as e:
        out[label] = os.strerror(e.errno)
def sc(*args):   # every argument a long: syscall() is variadic
    return libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
def attacks(prefix, pid):
    def seize():
        check(libc.ptrace(0x4206, pid, None, None))      # PTRACE_SEIZE, then let go:
        check(libc.ptrace(0x4207, pid, None, None))      # PTRACE_INTERRUPT,
        os.waitpid(pid, 0x40000000)                       # its stop (__WALL),
        check(libc.ptrace(17, pid, None, None))           # PTRACE_DETACH
    def read(name):
        def go():
            with open(f"/proc/{pid}/{name}", "rb") as f:
                f.read(8)
        return go
    def getfd():
        pfd = check(sc(434, pid, 0))
        try:
            os.close(check(sc(438, pfd, 0, 0)))
        finally:
            os.close(pfd)
    def vm_read():
        class iovec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        buf = ctypes.create_string_buffer(8)
        local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
        remote = iovec(ctypes.cast(buf, ctypes.c_void_p).value, 8)   # mapped in both: a fork
        check(sc(310, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    def open_only(name):   # the check is at open (reading address 0 would be EIO)
        return lambda: os.close(os.open(f"/proc/{pid}/{name}", os.O_RDONLY))
    for label, fn in (("ptrace", seize), ("environ", read("environ")), ("mem", open_only("mem")),
                      ("ns", open_only("ns/mnt")),
                      ("fd", lambda: os.readlink(f"/proc/{pid}/fd/0")), ("pidfd_getfd", getfd),
                      ("process_vm_readv", vm_read), ("signal", lambda: os.kill(pid, 0))):
        attempt(f"{prefix}{label}", fn)
# a user namespace of our own, every capability in it (as a sandboxed command)
uid, gid = os.getuid(), os.getgid()
check(libc.unshare(0x10000000))
write("/proc/self/setgroups", "deny")
write("/proc/self/uid_map", f"0 {uid} 1")
write("/proc/self/gid_map", f"0 {gid} 1")
hold_r, hold_w = os.pipe()
target = os.fork()                    # the init's place: same user namespace, outside the domain
if target == 0:                       # until we exit (a signal from the domain would be refused)
    os.close(hold_w)
    os.close(1)
    os.read(hold_r, 1)
    os._exit(0)
os.close(hold_r)
attacks("before_", target)            # live control: the same process, no domain yet
libc.prctl(38, 1, 0, 0, 0)            # PR_SET_NO_NEW_PRIVS
if kind:
    attr = struct.pack("=QQQ", 1 << 11 if kind == 1 else 0, 0, 0 if kind == 1 else 1 << 1)
    rs = check(sc(444, ctypes.create_string_buffer(attr, 24), 8 if kind == 1 else 24, 0))
    if kind == 1:
        root = os.open("/", os.O_PATH | os.O_DIRECTORY)
        check(sc(445, rs, 1, ctypes.create_string_buffer(struct.pack("=Qi", 1 << 11, root), 12), 0))
    check(sc(446, rs, 0))
attacks("outside_", target)
kid = os.fork()
if kid == 0:
    time.sleep(60)
    os._exit(0)
attacks("inside_", kid)               # live control: our own child, in the domain
os.kill(kid, 9)
os.waitpid(kid, 0)
step = ["unshare"]
def mounting():
    check(libc.unshare(0x10000000 | 0x00020000))   # a nested user namespace and a mount namespace
    write("/proc/self/setgroups", "deny")
    write("/proc/self/uid_map", "0 0 1")
    write("/proc/self/gid_map", "0 0 1")
    step[0] = "mount"
    check(libc.mount(None, b"/", None, (1 << 14) | (1 << 18), None))   # MS_REC | MS_PRIVATE
    check(libc.mount(b"none", where.encode(), b"tmpfs", 0, None))
    os.mkdir(where + "/old")
    step[0] = "pivot_root"
    os.chdir(where)
    check(sc(155, b".", b"old"))
    check(libc.umount2(b"/old", 2))
    step[0] = "nested userns"
    check(libc.unshare(0x10000000))
attempt("mounting", mounting)
out["mounting_step"] = step[0]
print(json.dumps(out))
'''

ATTACKS = ("ptrace", "environ", "mem", "ns", "fd", "pidfd_getfd", "process_vm_readv")


def _probe(kind: int, tmp_path) -> dict:
    where = tmp_path / "mnt"
    where.mkdir()
    done = subprocess.run([sys.executable, "-I", "-c", PROBE, str(kind), str(where)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not any(where.iterdir())   # the mount was the probe's own namespace's
    return json.loads(done.stdout)


def test_a_signal_scoped_domain_refuses_ptrace_access_and_allows_mount(tmp_path):
    why = host_capability("landlock_signal_scope")
    if why is not None:
        need("landlock_signal_scope", why)
    got = _probe(2, tmp_path)
    for name in ATTACKS + ("signal",):
        assert got[f"before_{name}"] == "ok", (name, got)            # control: no domain yet
        assert got[f"inside_{name}"] == "ok", (name, got)            # control: its own child
        assert got[f"outside_{name}"] in ("Operation not permitted", "Permission denied"), (name, got)
    assert (got["mounting"], got["mounting_step"]) == ("ok", "nested userns"), got


def test_control_a_filesystem_domain_refuses_mount(tmp_path):
    """The reason for the two kinds: the FS kind refuses ptrace access as well, but not
    signals, and forbids mount (and so pivot_root) to everything in the domain."""
    why = host_capability("landlock")
    if why is not None:
        need("landlock", why)
    got = _probe(1, tmp_path)
    for name in ATTACKS:
        assert got[f"inside_{name}"] == "ok", (name, got)
        assert got[f"outside_{name}"] in ("Operation not permitted", "Permission denied"), (name, got)
    assert got["outside_signal"] == "ok"
    assert (got["mounting"], got["mounting_step"]) == ("Operation not permitted", "mount"), got


def test_control_no_domain_reaches_the_outside_process(tmp_path):
    got = _probe(0, tmp_path)
    for name in ATTACKS + ("signal",):
        assert got[f"outside_{name}"] == "ok", (name, got)
    assert (got["mounting"], got["mounting_step"]) == ("ok", "nested userns"), got
