"""The sandbox's pid 1 (what pybwrap's --info-fd reports as ``child-pid``) against a
hostile command (THREAT_MODEL.md, "ptrace and signals" and "exit status" rows).

Where the kernel has Landlock the command runs in a Landlock domain of its own and the
init is dumpable, so its owner can read ``/proc/PID/environ`` and open
``/proc/PID/ns/*`` as with bwrap (tests/compat/test_enter.py). Landlock refuses every
ptrace access check from inside a domain to a process outside it: each attack below
is refused, also to a command that keeps CAP_SYS_PTRACE in its user namespace (which
an undumpable init alone does not stop), with two live controls: the same attack on
the command's own child succeeds, and, with PYSANDBOX_NO_LANDLOCK=1, on pid 1 itself.
Every configuration: a command that cannot mount (a filesystem domain) and one that may
(nested user namespaces allowed, CAP_SYS_ADMIN kept: the signal-scoped domain, which
also refuses its signals to pid 1 and to its parent). Without Landlock the init is
undumpable as before.

A command can also make pid 1 its tracer (PTRACE_TRACEME needs no permission): the
stops that follow must never be reported as its exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pysandbox
from pysandbox import plan as P
from tests.security import oracles
from tests.support import host_capability, need

pytestmark = pytest.mark.requires("userns")

ATTACKS = oracles.PRELUDE + r'''
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.syscall.restype = ctypes.c_long
def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def seize(pid):
    step("ptrace")
    check(libc.ptrace(0x4206, pid, None, None))
    libc.ptrace(17, pid, None, None)
def mem(pid):
    step("open")
    with open(f"/proc/{pid}/mem", "rb"):
        pass
def environ(pid):
    step("open")
    with open(f"/proc/{pid}/environ", "rb") as f:
        return len(f.read())
def fds(pid):
    # the numbers may be listed by owner (DAC); what they name must not be reachable
    step("readlink")
    names = []
    for n in os.listdir(f"/proc/{pid}/fd"):
        names.append(os.readlink(f"/proc/{pid}/fd/{n}"))
    return names
def getfd(pid):
    step("pidfd_open")
    pfd = check(libc.syscall(434, pid, 0))
    try:
        step("pidfd_getfd")
        got = []
        for target in range(0, 8):
            fd = libc.syscall(438, pfd, target, 0)
            if fd >= 0:
                os.close(fd)
                got.append(target)
            elif ctypes.get_errno() != 9:   # EBADF: no such descriptor; anything else is the answer
                check(fd)
        if not got:
            raise OSError(9, "no descriptor at all")
        return got
    finally:
        os.close(pfd)
def vm_read(pid):
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    buf = ctypes.create_string_buffer(8)
    local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
    remote = iovec(0x1000, 8)   # unmapped: EFAULT once the access itself is allowed
    step("process_vm_readv")
    if libc.syscall(310, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) < 0:
        e = ctypes.get_errno()
        if e != 14:
            raise OSError(e, os.strerror(e))
def ns(pid):
    step("open")
    os.close(os.open(f"/proc/{pid}/ns/user", os.O_RDONLY))
ATTACKS = {"seize": seize, "mem": mem, "environ": environ, "fd": fds, "pidfd_getfd": getfd,
           "process_vm_readv": vm_read, "ns": ns}
RESULTS["ppid"] = os.getppid()
kid = os.fork()
if kid == 0:
    time.sleep(60)
    os._exit(0)
for name, fn in ATTACKS.items():
    for pid in sorted({1, os.getppid()}):
        attempt(f"{name}_{pid}", lambda: fn(pid))
    attempt(f"{name}_child", lambda: fn(kid))   # live control
os.kill(kid, 9)
os.waitpid(kid, 0)
done()
'''

NAMES = ("seize", "mem", "environ", "fd", "pidfd_getfd", "process_vm_readv", "ns")

# (policy keywords, whether the command may mount: Plan.command_may_mount)
CONFIGS = {
    "no-caps": ({}, False),
    "cap-sys-ptrace": ({"caps_keep": ("sys_ptrace",)}, False),
    "nested-userns": ({"allow_nested_userns": True}, True),
    "nested-userns+cap-sys-ptrace": ({"allow_nested_userns": True, "caps_keep": ("sys_ptrace",)}, True),
    "cap-sys-admin": ({"caps_keep": ("sys_admin",)}, True),
    "cap-sys-admin+sys-ptrace": ({"caps_keep": ("sys_admin", "sys_ptrace")}, True),
}


def _config(name, tmp_path):
    """The policy of CONFIGS[name], or need() where this kernel lacks the domain that
    protects it (a command that may mount needs Landlock's signal scope; one that keeps
    CAP_SYS_PTRACE is held off only by a domain)."""
    kw, may_mount = CONFIGS[name]
    cap = "landlock_signal_scope" if may_mount else "landlock"
    if "sys_ptrace" in kw.get("caps_keep", ()) or may_mount:
        why = host_capability(cap)
        if why is not None:
            need(cap, why)
    policy = pysandbox.Policy.default(workdir=tmp_path, **kw)
    assert P.compile(policy).command_may_mount is may_mount
    return policy


def _refused(res, pids):
    for name in NAMES:
        assert res[f"{name}_child"]["ok"], (name, res[f"{name}_child"])   # the control
        for pid in pids:
            got = res[f"{name}_{pid}"]
            assert got["ok"] is False and got["errname"] in ("EPERM", "EACCES"), (name, pid, got)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_pid1_unreachable_from_the_command(backend, tmp_path, config):
    res = oracles.run_probe(ATTACKS, _config(config, tmp_path), backend)
    assert res["_returncode"] == 0, res["_stderr"]
    _refused(res, sorted({1, res["ppid"]}))


@pytest.mark.parametrize("config", ["cap-sys-ptrace", "nested-userns+cap-sys-ptrace", "cap-sys-admin+sys-ptrace"])
def test_control_without_landlock_cap_sys_ptrace_reaches_pid1(backend, tmp_path, monkeypatch, config):
    """The live control of the line above: without the command's domain
    (PYSANDBOX_NO_LANDLOCK=1) pid 1 is undumpable, and a command that keeps
    CAP_SYS_PTRACE in the sandbox's user namespace reaches it all the same."""
    policy = _config(config, tmp_path)
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    res = oracles.run_probe(ATTACKS, policy, backend)
    assert res["_returncode"] == 0, res["_stderr"]
    # ptrace itself (and with it every register and byte of pid 1), process_vm_readv,
    # its namespaces and its descriptors (EBADF: past the permission check; the native
    # init holds none below 8). /proc/1/{mem,environ,fd} add a check on the owner of an
    # undumpable process's /proc files, uid 0 of the sandbox's user namespace: they open
    # too where that uid is mapped (root's sandboxes), not otherwise.
    for name in ("seize", "process_vm_readv", "ns", "pidfd_getfd"):
        got = res[f"{name}_1"]
        assert got["ok"] or (name, got["errname"]) == ("pidfd_getfd", "EBADF"), (name, got)


SIGNALS = r'''
import json, os, time
kid = os.fork()
if kid == 0:
    time.sleep(60)
    os._exit(0)
out = {}
for who, pid in (("pid1", 1), ("parent", os.getppid()), ("child", kid)):
    try:
        os.kill(pid, 0)
        out[who] = "ok"
    except OSError as e:
        out[who] = e.strerror
os.kill(kid, 9)
os.waitpid(kid, 0)
print(json.dumps(out))
'''


@pytest.mark.parametrize("config", ["no-caps", "nested-userns", "cap-sys-admin"])
def test_signals_out_of_a_signal_scoped_domain_are_refused(backend, tmp_path, config):
    """Wherever the kernel has Landlock's signal scope, every command's domain scopes
    signals, whether it may mount or not: no signal from the command to pid 1 or its
    parent (the init; a session's server and keeper: a command that could SIGSTOP its
    keeper could hold its own end). The command's own child is the control."""
    why = host_capability("landlock_signal_scope")
    if why is not None:
        need("landlock_signal_scope", why)
    policy = _config(config, tmp_path)
    done = pysandbox.run([sys.executable, "-I", "-c", SIGNALS], policy=policy, backend=backend,
                         capture_output=True, timeout=oracles.PROBE_TIMEOUT)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got == {"pid1": "Operation not permitted", "parent": "Operation not permitted", "child": "ok"}, got


@pytest.mark.parametrize("config", ["no-caps", "nested-userns"])
def test_control_without_landlock_signals_reach_pid1(backend, tmp_path, monkeypatch, config):
    """The live control of the line above: without the command's domain
    (PYSANDBOX_NO_LANDLOCK=1) the same probe signals pid 1 and its parent."""
    policy = _config(config, tmp_path)
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    done = pysandbox.run([sys.executable, "-I", "-c", SIGNALS], policy=policy, backend=backend,
                         capture_output=True, timeout=oracles.PROBE_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"pid1": "ok", "parent": "ok", "child": "ok"}


TRACEME = r'''
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if libc.ptrace(0, 0, None, None) != 0:   # PTRACE_TRACEME: our parent becomes our tracer
    sys.exit(3)
os.kill(os.getpid(), int(sys.argv[1]))    # a signal-delivery stop, reported to the tracer
sys.exit(7)
'''


@pytest.mark.parametrize("sig,expected", [(12, -12), (28, 7)], ids=["SIGUSR2", "SIGWINCH"])
def test_ptrace_stops_are_not_the_exit_status(backend, tmp_path, sig, expected):
    """SIGUSR2 kills once the stop is let go (-12); SIGWINCH is ignored and the command
    goes on to exit 7. Before, the stop itself was reported (the launcher raised)."""
    done = pysandbox.run([sys.executable, "-I", "-c", TRACEME, str(sig)],
                         policy=pysandbox.Policy.default(workdir=tmp_path), backend=backend,
                         capture_output=True, timeout=oracles.PROBE_TIMEOUT)
    assert done.returncode == expected, done.stderr.decode(errors="replace")


@pytest.mark.parametrize("config", ["no-caps", "nested-userns", "cap-sys-admin"])
def test_the_owner_reads_pid1_as_with_bwrap(backend, tmp_path, config):
    """The other side of the line: the caller (the sandbox's owner, root or not) reads
    pid 1's environment and opens its namespaces, as flatpak enter does with bwrap's
    child-pid (tests/compat/test_enter.py compares with /usr/bin/bwrap itself), also
    where the command may mount (bwrap's defaults: nested user namespaces allowed)."""
    cap = "landlock_signal_scope" if CONFIGS[config][1] else "landlock"
    why = host_capability(cap)
    if why is not None:
        need(cap, why + ": pid 1 stays undumpable there (documented)")
    pids: list = []
    policy = _config(config, tmp_path)
    env = dict(os.environ, PSB_OWNER_MARK="seen")
    with pysandbox.Popen(["sh", "-c", "echo ready; read x"], policy=policy, backend=backend, env=env,
                         on_start=pids.append, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout.readline() == b"ready\n"
            pid = pids[0]
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            opened = []
            for name in ("user", "mnt", "pid", "net", "ipc", "uts"):
                os.close(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY))
                opened.append(name)
        finally:
            proc.stdin.write(b"done\n")
            proc.stdin.close()
    assert proc.returncode == 0
    assert b"PSB_OWNER_MARK=seen" in environ
    assert len(opened) == 6
