"""A policy that lets the command nest sandboxes still lets it mount.

The command's Landlock domain (native/psb_landlock.h: it keeps the reported init out of
the command's reach) also forbids mount and pivot_root to everything in it, so a policy
whose command may mount (nested user namespaces, or CAP_SYS_ADMIN kept:
Plan.command_may_mount) gets no domain, on both backends and in sessions; the init then
stays undumpable. Control: the default policy refuses the nested user namespace.
"""

from __future__ import annotations

import sys

import pytest

import pysandbox
from pysandbox import plan as P

pytestmark = pytest.mark.requires("userns")

# In one process (an exec as an unmapped uid would drop the new namespace's
# capabilities): a user and mount namespace of its own, then a tmpfs mount in it.
MOUNT = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x00020000) != 0:   # CLONE_NEWUSER | CLONE_NEWNS
    raise SystemExit(f"unshare: {os.strerror(ctypes.get_errno())}")
if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) != 0:
    raise SystemExit(f"mount: {os.strerror(ctypes.get_errno())}")
print("mounted")
"""
NESTED_MOUNT = [sys.executable, "-I", "-c", MOUNT]


@pytest.mark.parametrize("via", ["one-shot", "session"])
def test_a_nesting_policy_can_mount_in_its_own_namespaces(backend, tmp_path, via):
    policy = pysandbox.Policy.default(workdir=tmp_path, allow_nested_userns=True)
    if via == "session":
        with pysandbox.Sandbox(policy, backend=backend) as sb:
            done = sb.run(NESTED_MOUNT, capture_output=True, text=True, timeout=60)
    else:
        done = pysandbox.run(NESTED_MOUNT, policy=policy, backend=backend, capture_output=True, text=True,
                             timeout=60)
    assert (done.returncode, done.stdout) == (0, "mounted\n"), done.stderr


def test_control_the_default_policy_refuses_the_nested_namespace(backend, tmp_path):
    done = pysandbox.run(NESTED_MOUNT, policy=pysandbox.Policy.default(workdir=tmp_path), backend=backend,
                         capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "mounted" not in done.stdout


@pytest.mark.parametrize("kw, may", [({}, False), ({"allow_nested_userns": True}, True),
                                     ({"caps_keep": ("sys_admin",)}, True), ({"caps_keep": ("net_raw",)}, False)])
def test_command_may_mount(tmp_path, kw, may):
    policy = pysandbox.Policy.default(workdir=tmp_path, **kw)
    assert P.compile(policy).command_may_mount is may
    # the session's own reading of the same rule (pysandbox/session.py)
    assert (policy.allow_nested_userns or "sys_admin" in policy.caps_keep) is may
