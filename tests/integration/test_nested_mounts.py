"""A policy that lets the command nest sandboxes still lets it mount.

The command's Landlock domain (native/psb_landlock.h: it keeps the reported init out of
the command's reach) must not forbid mount and pivot_root, as one that handles a
filesystem right does: a policy whose command may mount (nested user namespaces, or
CAP_SYS_ADMIN kept: Plan.command_may_mount) gets the signal-scoped domain (Landlock ABI
6), or none on an older kernel (pysandbox/backends/landlock.py), on both backends and in
sessions. Here the command mounts, pivot_roots and runs a nested pybwrap. Control: the
default policy refuses the nested user namespace.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

import pysandbox
from pysandbox import plan as P

pytestmark = pytest.mark.requires("userns")

# In one process (an exec as an unmapped uid would drop the new namespace's
# capabilities): a user and mount namespace of its own (argv[1] "direct": a mount
# namespace alone, with CAP_SYS_ADMIN kept), then a tmpfs mount in it and a pivot_root
# into it.
MOUNT = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
def check(r, what):
    if r != 0:
        raise SystemExit(f"{what}: {os.strerror(ctypes.get_errno())}")
# CLONE_NEWUSER | CLONE_NEWNS; "direct": CLONE_NEWNS alone, owned by the user namespace
# the command holds CAP_SYS_ADMIN in
check(libc.unshare(0x00020000 if sys.argv[1:] == ["direct"] else 0x10000000 | 0x00020000), "unshare")
check(libc.mount(None, b"/", None, (1 << 14) | (1 << 18), None), "make-rprivate")
check(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), "mount")
print("mounted")
os.chdir("/tmp")    # pivot_root(".", "."): the old root stacked under the new one (no mkdir:
check(libc.syscall(ctypes.c_long(155), b".", b"."), "pivot_root")   # the uid may be unmapped)
check(libc.umount2(b".", 2), "umount")
print("pivoted")
"""
NESTED_MOUNT = [sys.executable, "-I", "-c", MOUNT]
DONE = "mounted\npivoted\n"


@pytest.mark.parametrize("via", ["one-shot", "session"])
def test_a_nesting_policy_can_mount_in_its_own_namespaces(backend, tmp_path, via):
    policy = pysandbox.Policy.default(workdir=tmp_path, allow_nested_userns=True)
    if via == "session":
        with pysandbox.Sandbox(policy, backend=backend) as sb:
            done = sb.run(NESTED_MOUNT, capture_output=True, text=True, timeout=60)
    else:
        done = pysandbox.run(NESTED_MOUNT, policy=policy, backend=backend, capture_output=True, text=True,
                             timeout=60)
    assert (done.returncode, done.stdout) == (0, DONE), done.stderr


@pytest.mark.parametrize("via", ["one-shot", "session"])
def test_a_command_keeping_cap_sys_admin_mounts_in_the_sandbox(backend, tmp_path, via):
    """No nested user namespace: a mount namespace of its own, with CAP_SYS_ADMIN."""
    policy = pysandbox.Policy.default(workdir=tmp_path, caps_keep=("sys_admin",))
    if via == "session":
        with pysandbox.Sandbox(policy, backend=backend) as sb:
            done = sb.run(NESTED_MOUNT + ["direct"], capture_output=True, text=True, timeout=60)
    else:
        done = pysandbox.run(NESTED_MOUNT + ["direct"], policy=policy, backend=backend, capture_output=True,
                             text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, DONE), done.stderr


# A nested pybwrap (bwrap's defaults: it may nest in turn) whose reported child-pid its
# owner, the outer command, reads as flatpak enter would. --ro-bind /proc: a new procfs
# is refused under the outer sandbox's covered one (the kernel's "fully visible" rule; the
# same with bwrap in bwrap).
NESTED_PYBWRAP = r"""
import json, os, subprocess, sys
r, w = os.pipe()
proc = subprocess.Popen([sys.executable, "-m", "bwrap_compat", "--unshare-all", "--die-with-parent",
                         "--ro-bind", "/", "/", "--ro-bind", "/proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                         "--info-fd", str(w), "--", "sh", "-c", "echo inner-ready; read x"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=[w],
                        env=dict(os.environ, PSB_NESTED_MARK="inner"))
os.close(w)
info = json.loads(os.read(r, 65536) or b"{}")
ready = proc.stdout.readline().decode().strip()
environ = open(f"/proc/{info['child-pid']}/environ", "rb").read().split(b"\0")
proc.communicate(b"done\n", timeout=60)
print(json.dumps({"ready": ready, "mark": b"PSB_NESTED_MARK=inner" in environ, "rc": proc.returncode}))
"""


def test_a_nested_pybwrap_runs_and_reports_a_readable_pid(backend, tmp_path):
    from tests.support import host_capability, need
    why = host_capability("landlock_signal_scope")
    if why is not None:
        need("landlock_signal_scope", why + ": the nested init stays undumpable there")
    # root's sandbox maps uid 0, which a nested user namespace maps again only with
    # CAP_SETFCAP (the kernel's verify_root_map); an unprivileged caller's needs none
    caps = ("setfcap",) if os.geteuid() == 0 else ()
    policy = pysandbox.Policy.default(workdir=tmp_path, allow_nested_userns=True, caps_keep=caps)
    done = pysandbox.run([sys.executable, "-c", NESTED_PYBWRAP], policy=policy, backend=backend,
                         capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ready": "inner-ready", "mark": True, "rc": 0}, done.stdout


INNER_RUN = """
import pysandbox
try:
    pysandbox.run(["true"], policy=pysandbox.Policy.default(workdir="/tmp"), backend="native")
    print("ran")
except pysandbox.SandboxError as e:
    print(e)
"""


@pytest.mark.parametrize("kw, want", [({"allow_nested_userns": True}, "caps_keep=('setfcap',)"),
                                      ({}, "must allow user namespaces inside it")],
                         ids=["nested-userns", "control-default"])
def test_a_nested_sandbox_as_root_names_what_the_outer_one_lacks(backend, tmp_path, kw, want):
    """Root's sandbox maps uid 0; a nested user namespace can be made (nesting allowed) but
    uid 0 mapped in it again only with CAP_SETFCAP: the message says that, not "allow
    user namespaces" (which is already so). Control: nesting not allowed, that message."""
    from tests.support import not_applicable
    if os.geteuid() != 0:
        not_applicable("root-only: an unprivileged caller's sandbox maps its own uid, which needs no CAP_SETFCAP")
    policy = pysandbox.Policy.default(workdir=tmp_path, **kw)
    done = pysandbox.run([sys.executable, "-c", INNER_RUN], policy=policy, backend=backend,
                         capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and want in done.stdout, (done.stdout, done.stderr)
    other = "must allow user namespaces" if "setfcap" in want else "setfcap"
    assert other not in done.stdout


def test_control_the_default_policy_refuses_the_nested_namespace(backend, tmp_path):
    done = pysandbox.run(NESTED_MOUNT, policy=pysandbox.Policy.default(workdir=tmp_path), backend=backend,
                         capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "mounted" not in done.stdout


@pytest.mark.parametrize("kw, may", [({}, False), ({"allow_nested_userns": True}, True),
                                     ({"caps_keep": ("sys_admin",)}, True), ({"caps_keep": ("net_raw",)}, False)])
def test_command_may_mount(tmp_path, kw, may):
    policy = pysandbox.Policy.default(workdir=tmp_path, **kw)
    assert P.compile(policy).command_may_mount is may
    # the session's reading of the same rule, off the policy (pysandbox/session.py)
    assert P.command_may_mount(policy.allow_nested_userns, policy.caps_keep) is may
