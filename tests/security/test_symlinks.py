"""Filesystem boundary: symlinks in bind sources, destinations, the workdir and hides
(docs/ARCHITECTURE.md, invariant 10).

The attack: an earlier sandboxed command (or anyone with write access to a bound
directory) plants ``sub -> /oldroot`` (the setup view has the host root there),
``sub -> ../../..`` or ``sub -> /`` after the Policy was built; a later launch of a
policy binding ``sub`` read-write would then bind the host's ``/``. Required: the
launch fails closed (``symlink_in_path``), nothing is bound; a real directory (the
control) binds fine; a caller who names a symlink on purpose gets the target it had
when the Policy was built. The commands here only read (never write) through the
path under attack, so even a backend that follows the symlink cannot harm the host.
"""

from __future__ import annotations

import os

import pytest

import pysandbox
from pysandbox.errors import Reason, SandboxError, SetupError
from pysandbox.process import compiled
from tests.support import host_capability, need

pytestmark = pytest.mark.requires("userns")




def _run(argv, policy, backend):
    return pysandbox.run(argv, policy=policy, backend=backend, capture_output=True, timeout=60)


# What the command reports about the bound path: is it the host root (has /etc/hostname
# and the host's /proc/1 mount of the host?), or our marker directory?
LOOK = 'test -e "$1/MARKER" && echo marker; test -e "$1/etc/hostname" && echo hostroot; ' \
       'test -d "$1/oldroot" && echo setuproot; true'


@pytest.mark.parametrize("target", ["/oldroot", "../../../../../../../..", "/", "/etc"])
def test_symlink_swapped_in_after_policy_fails_closed(backend, tmp_path, target):
    proj = tmp_path / "proj"
    sub = proj / "sub"
    sub.mkdir(parents=True)
    (sub / "MARKER").write_text("control")
    policy = pysandbox.Policy.default(workdir=proj, rw=[sub])
    # Control: the real directory binds, read-write.
    done = _run(["sh", "-c", LOOK + '; echo w > "$1/written" && echo wrote', "sh", str(sub)], policy, backend)
    assert done.returncode == 0 and done.stdout.split() == [b"marker", b"wrote"], done
    assert (sub / "written").read_text() == "w\n"
    # Attack: swap the directory for a symlink (an earlier command could do exactly this).
    (sub / "MARKER").unlink()
    (sub / "written").unlink()
    sub.rmdir()
    os.symlink(target, sub)
    with pytest.raises(SandboxError) as info:
        done = _run(["sh", "-c", LOOK, "sh", str(sub)], policy, backend)
        pytest.fail(f"launched through a planted symlink to {target}: {done.stdout!r}")
    assert info.value.reason is Reason.SYMLINK_IN_PATH, info.value
    assert isinstance(info.value, SetupError) and info.value.filename == str(sub)


def test_symlink_in_parent_component_fails_closed(backend, tmp_path):
    """A parent of the bound path swapped for a symlink to another tree that has the
    same leaf: still refused (no component of the source may be a symlink)."""
    proj = tmp_path / "proj"
    (proj / "a" / "b").mkdir(parents=True)
    other = tmp_path / "other"
    (other / "b").mkdir(parents=True)
    (other / "b" / "SECRET").write_text("not for the sandbox")
    policy = pysandbox.Policy.default(workdir=None, ro=[proj / "a" / "b"])
    done = _run(["ls", str(proj / "a" / "b")], policy, backend)
    assert done.returncode == 0 and done.stdout == b"", done   # control
    (proj / "a" / "b").rmdir()
    (proj / "a").rmdir()
    os.symlink(other, proj / "a")
    with pytest.raises(SandboxError) as info:
        done = _run(["ls", str(proj / "a" / "b")], policy, backend)
        pytest.fail(f"bound the swapped tree: {done.stdout!r}")
    assert info.value.reason is Reason.SYMLINK_IN_PATH, info.value


def test_workdir_swapped_for_symlink_fails_closed(backend, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    policy = pysandbox.Policy.default(workdir=work)
    done = _run(["pwd"], policy, backend)
    assert done.returncode == 0 and done.stdout.strip() == str(work).encode(), done   # control
    work.rmdir()
    os.symlink("/oldroot", work)
    with pytest.raises(SandboxError) as info:
        done = _run(["ls"], policy, backend)
        pytest.fail(f"ran in the swapped workdir: {done.stdout!r}")
    assert info.value.reason is Reason.SYMLINK_IN_PATH, info.value


def test_symlink_named_on_purpose_binds_its_policy_time_target(backend, tmp_path):
    """Backend-agnostic: the symlink is resolved when the Policy is built; retargeting it
    later changes nothing (the launch binds the canonical target, without following
    the symlink again)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("real")
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "f").write_text("decoy")
    link = tmp_path / "link"
    os.symlink(real, link)
    policy = pysandbox.Policy.default(workdir=None, ro=[link])
    binds = [op for op in policy.fs if isinstance(op, pysandbox.Bind) and op.src != "/"]
    assert [(b.src, b.dest) for b in binds] == [(str(real), str(real))]
    bind = pysandbox.Bind(str(link), "/mnt", readonly=True)
    assert bind.src == str(real) and bind.dest == "/mnt"
    both = policy.replace(fs=policy.fs + (bind,))
    done = _run(["sh", "-c", f"cat {real}/f /mnt/f"], both, backend)   # (the link itself is in /tmp: private)
    assert done.returncode == 0 and done.stdout == b"realreal", done
    # Retarget the symlink after the Policy: the launch still shows the old target.
    link.unlink()
    os.symlink(decoy, link)
    done = _run(["cat", "/mnt/f"], both, backend)
    assert done.returncode == 0 and done.stdout == b"real", done


def test_bind_destination_resolved_in_new_root(tmp_path):
    """Native: a destination through a symlink in a writable bind resolves inside the new
    root. ``dst -> ../../../../..`` (climbing out of /newroot into the setup view) and
    ``dst -> /oldroot/...`` land inside the sandbox, never on the host."""
    if host_capability("native"):
        need("native", host_capability("native"))
    proj = tmp_path / "proj"
    (proj / "d" / "x").mkdir(parents=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "MARKER").write_text("bound")
    policy = pysandbox.Policy.default(workdir=proj)
    policy = policy.replace(fs=policy.fs + (pysandbox.Tmpfs("/mnt"), pysandbox.Dir("/mnt/x"),
                                            pysandbox.Bind(str(src), f"{proj}/d/x")))
    plan = compiled(policy)   # compiled while d is a real directory
    done = _run(["cat", f"{proj}/d/x/MARKER"], policy, "native")
    assert done.returncode == 0 and done.stdout == b"bound", done   # control
    host_mnt = sorted(os.listdir("/mnt"))
    for target in ("/mnt", "../" * 12 + "mnt"):
        if os.path.islink(proj / "d"):
            os.unlink(proj / "d")
        else:
            (proj / "d" / "x").rmdir()
            (proj / "d").rmdir()
        # Absolute: /mnt of the sandbox (its tmpfs), not of the setup view or the host;
        # relative: ".." stops at the new root.
        os.symlink(target, proj / "d")
        done = _run(["sh", "-c", "cat /mnt/x/MARKER"], policy, "native")
        assert plan is compiled(policy)
        assert done.returncode == 0 and done.stdout == b"bound", (target, done)
        assert sorted(os.listdir("/mnt")) == host_mnt, "a mount point was created on the host"


def _hide_policy(tmp_path):
    base = tmp_path / "base"
    (base / "real").mkdir(parents=True)
    (base / "real" / "secret").write_text("SECRET")
    (base / "real" / "public").write_text("public")
    os.symlink(str(base / "real"), base / "link")   # absolute, as /var/run -> /run
    return base, pysandbox.Policy.default(workdir=None, ro=[base], hide=[base / "link" / "secret"])


def test_hide_through_absolute_symlink_hides(backend, tmp_path):
    base, policy = _hide_policy(tmp_path)
    try:
        done = _run(["sh", "-c", f"cat {base}/real/public; cat {base}/real/secret; true"], policy, backend)
    except SandboxError as exc:   # failing closed is acceptable, showing it is not
        assert backend == "bwrap", exc
        return
    assert done.stdout == b"public", done   # control: the neighbour is readable
    assert b"SECRET" not in done.stdout


def test_hide_unreachable_fails_closed_vanished_skipped(tmp_path):
    """Native: a hidden path that exists when the plan is made but cannot be reached at
    launch (its directory replaced by a file: ENOTDIR) fails closed; one that merely
    vanished (ENOENT on the last component) is skipped."""
    if host_capability("native"):
        need("native", host_capability("native"))
    base = tmp_path / "base"
    (base / "d").mkdir(parents=True)
    (base / "d" / "secret").write_text("SECRET")
    (base / "d" / "dir").mkdir()
    policy = pysandbox.Policy.default(workdir=None, ro=[base], hide=[base / "d" / "secret", base / "d" / "dir"])
    done = _run(["sh", "-c", f"cat {base}/d/secret; ls {base}/d/dir; echo end"], policy, "native")
    assert b"SECRET" not in done.stdout and done.stdout.endswith(b"end\n"), done   # control: hidden
    compiled(policy)
    (base / "d" / "secret").unlink()   # vanished: nothing left to hide
    (base / "d" / "dir").rmdir()
    done = _run(["sh", "-c", f"ls {base}/d; echo end"], policy, "native")
    assert done.returncode == 0 and done.stdout == b"end\n", done
    # Unreachable for another reason: fail closed, naming the path.
    (base / "d").rmdir()
    (base / "d").write_text("now a file")
    with pytest.raises(SetupError) as info:
        _run(["true"], policy, "native")
    assert info.value.errno == 20 and str(base / "d") in (info.value.filename or ""), info.value


FALLBACK = r'''
import ctypes, json, os, struct, sys
import pysandbox
# Before Linux 5.6/5.2: openat2, open_tree and move_mount answer ENOSYS (a filter of
# ours, inherited by the sandbox's setup), so the component walk and the magic-link
# binds run.
ENOSYS = 38
def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)
prog = insn(0x20, 0, 0, 0)                      # A = nr
for i, nr in enumerate((437, 428, 429)):        # openat2, open_tree, move_mount
    prog += insn(0x15, 3 - i, 0, nr)
prog += insn(0x06, 0, 0, 0x7FFF0000)            # allow
prog += insn(0x06, 0, 0, 0x00050000 | ENOSYS)   # errno ENOSYS
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fp = Fprog(len(prog) // 8, ctypes.addressof(buf))
assert libc.prctl(38, 1, 0, 0, 0) == 0          # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(fp), 0, 0) == 0, ctypes.get_errno()   # SECCOMP_MODE_FILTER
out = {"openat2": libc.syscall(437, -100, b"/", None, 0) == -1 and ctypes.get_errno()}
sub, hide = sys.argv[1], sys.argv[2]
policy = pysandbox.Policy.default(workdir=None, rw=[sub], hide=[hide])
done = pysandbox.run(["sh", "-c", f"echo w > {sub}/written && cat {hide}; true"], policy=policy,
                     backend="native", capture_output=True, timeout=60)
out["control"] = [done.returncode, done.stdout.decode(), done.stderr.decode()]
os.unlink(sub + "/written")
os.rmdir(sub)
os.symlink("/oldroot", sub)
try:
    pysandbox.run(["true"], policy=policy, backend="native", timeout=60)
    out["attack"] = "launched"
except pysandbox.SandboxError as exc:
    out["attack"] = exc.reason.value
print(json.dumps(out))
'''


@pytest.mark.parametrize("no_setattr", [False, True])
def test_fallback_without_openat2_fails_closed(tmp_path, no_setattr):
    """Forced fallback (no openat2/open_tree/move_mount; and no mount_setattr): the
    component walk still binds a real directory and hides, and refuses a planted symlink."""
    import json
    import subprocess
    import sys
    from pysandbox.backends.native import NO_MOUNT_SETATTR_ENV
    if host_capability("native"):
        need("native", host_capability("native"))
    sub = tmp_path / "sub"
    sub.mkdir()
    (tmp_path / "secret").write_text("SECRET")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if no_setattr:
        env[NO_MOUNT_SETATTR_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", FALLBACK, str(sub), str(tmp_path / "secret")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["openat2"] == 38, res   # the filter is in force
    assert res["control"][0] == 0 and "SECRET" not in res["control"][1], res
    assert res["attack"] == "symlink_in_path", res


def test_overlay_layer_swapped_for_symlink_fails_closed(tmp_path):
    """Native: an overlay's lower directory swapped for a symlink after the Policy fails
    the launch (checked before the kernel resolves the layer paths itself)."""
    if host_capability("native"):
        need("native", host_capability("native"))
    lower = tmp_path / "lower"
    lower.mkdir()
    (lower / "f").write_text("lower")
    policy = pysandbox.Policy.default(workdir=None)
    policy = policy.replace(fs=policy.fs + (pysandbox.Overlay("/mnt", lower=(str(lower),), tmp=True),))
    done = _run(["cat", "/mnt/f"], policy, "native")
    assert done.returncode == 0 and done.stdout == b"lower", done   # control
    (lower / "f").unlink()
    lower.rmdir()
    os.symlink("/oldroot/etc", lower)
    with pytest.raises(SandboxError) as info:
        done = _run(["ls", "/mnt"], policy, "native")
        pytest.fail(f"mounted an overlay of the swapped layer: {done.stdout!r}")
    assert info.value.reason is Reason.SYMLINK_IN_PATH and info.value.filename == str(lower), info.value
