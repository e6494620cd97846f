"""Overlays on the native backend against a real kernel, as root and as an unprivileged
user: layer precedence, writes reaching the upper dir (and only it), tmp overlays
leaving nothing behind, read-only overlays refusing writes, the mount flags, and
bwrap's overlap message through pybwrap. The installed bwrap (0.8) lacks the options:
the bwrap backend refuses them with a reason."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

import pysandbox
from pysandbox import policy as PP
from pysandbox import probe
from pysandbox.errors import BwrapOptionUnsupported, Reason
from tests.support import host_capability, need, not_applicable, python_in_sandbox

pytestmark = pytest.mark.requires("userns", "native")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEST = "/tmp/ov"   # on the policy's private /tmp: no mount point on the host


@pytest.fixture
def tree(tmp_path):
    """l1 (bottom) and l2 (top) with overlapping names; empty up and wk."""
    for name in ("l1", "l2", "up", "wk"):
        (tmp_path / name).mkdir()
    (tmp_path / "l1" / "a").write_text("a from l1")
    (tmp_path / "l1" / "b").write_text("b from l1")
    (tmp_path / "l2" / "a").write_text("a from l2")
    (tmp_path / "l2" / "c").write_text("c from l2")
    return tmp_path


def _snapshot(*dirs):
    out = {}
    for d in dirs:
        for base, subdirs, files in os.walk(d):
            for name in subdirs + files:
                path = os.path.join(base, name)
                st = os.lstat(path)
                out[path] = (st.st_mode, st.st_size, open(path, "rb").read() if os.path.isfile(path) else None)
    return out


def _overlay(tree, kind):
    lower = (str(tree / "l1"), str(tree / "l2"))
    if kind == "rw":
        return PP.Overlay(DEST, lower, str(tree / "up"), str(tree / "wk"))
    if kind == "tmp":
        return PP.Overlay(DEST, lower, tmp=True)
    return PP.Overlay(DEST, lower)


def run(overlays, script, **kw):
    base = PP.Policy.default()
    policy = base.replace(fs=base.fs + tuple(overlays))
    return pysandbox.run([python_in_sandbox(), "-c", script], policy=policy, backend="native",
                         capture_output=True, text=True, timeout=60, **kw)


READ = f"""
import os
for n in ("a", "b", "c"):
    print(n, open(os.path.join({DEST!r}, n)).read())
"""


@pytest.mark.parametrize("kind", ["rw", "tmp", "ro"])
def test_lowers_are_merged_the_last_given_on_top(tree, kind):
    before = _snapshot(tree / "l1", tree / "l2")
    done = run([_overlay(tree, kind)], READ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a a from l2", "b b from l1", "c c from l2"]
    assert _snapshot(tree / "l1", tree / "l2") == before


def test_writes_go_to_the_upper_dir_and_the_lowers_stay(tree):
    before = _snapshot(tree / "l1", tree / "l2")
    script = f"""
import os
open({DEST!r} + "/a", "w").write("a changed")
open({DEST!r} + "/new", "w").write("new file")
os.unlink({DEST!r} + "/b")
print(sorted(os.listdir({DEST!r})))
"""
    done = run([_overlay(tree, "rw")], script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['a', 'c', 'new']"
    assert (tree / "up" / "a").read_text() == "a changed"
    assert (tree / "up" / "new").read_text() == "new file"
    assert (tree / "up" / "new").stat().st_uid == os.getuid()
    assert not (tree / "up" / "b").is_file()           # a whiteout, not the file
    assert _snapshot(tree / "l1", tree / "l2") == before
    again = run([_overlay(tree, "rw")], READ.replace('"b", ', ""))   # the next run sees the upper dir
    assert again.stdout.splitlines() == ["a a changed", "c c from l2"], again.stderr


def test_tmp_overlay_writes_vanish_and_leave_nothing_on_the_host(tree):
    before = _snapshot(tree)
    host_mounts = open("/proc/self/mountinfo").read()
    script = f"""
import os
open({DEST!r} + "/a", "w").write("a changed")
open({DEST!r} + "/new", "w").write("new")
print(open({DEST!r} + "/a").read(), sorted(os.listdir({DEST!r})))
"""
    done = run([_overlay(tree, "tmp")], script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "a changed ['a', 'b', 'c', 'new']"
    again = run([_overlay(tree, "tmp")], f"import os; print(sorted(os.listdir({DEST!r})))")
    assert again.stdout.strip() == "['a', 'b', 'c']", again.stderr
    assert _snapshot(tree) == before
    assert not glob.glob("/tmp-overlay-*") and not glob.glob("/tmp/tmp-overlay-*") \
        and not glob.glob("/run/tmp-overlay-*")
    assert open("/proc/self/mountinfo").read().count(" overlay ") == host_mounts.count(" overlay ")


def test_two_tmp_overlays_are_independent(tree):
    second = PP.Overlay("/tmp/ov2", (str(tree / "l1"),), tmp=True)
    script = f"""
open({DEST!r} + "/x", "w").write("1")
import os
print(os.path.exists("/tmp/ov2/x"))
"""
    done = run([_overlay(tree, "tmp"), second], script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_read_only_overlay_refuses_writes(tree):
    script = f"""
import errno
for path in ({DEST!r} + "/new", {DEST!r} + "/a"):
    try:
        open(path, "w")
    except OSError as exc:
        print(errno.errorcode[exc.errno])
    else:
        print("written")
"""
    done = run([_overlay(tree, "ro")], script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["EROFS", "EROFS"]
    assert sorted(os.listdir(tree / "l2")) == ["a", "c"]


def test_commas_colons_and_backslashes_in_layer_names(tmp_path):
    names = {"l,1": "a", "l:2": "b", "l\\3": "c"}
    for name, file in names.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / file).write_text(name)
    for name in ("u,p", "w:k"):
        (tmp_path / name).mkdir()
    lower = tuple(str(tmp_path / n) for n in names)
    op = PP.Overlay(DEST, lower, str(tmp_path / "u,p"), str(tmp_path / "w:k"))
    done = run([op], f"print(*(open({DEST!r} + '/' + f).read() for f in 'abc')); open({DEST!r} + '/new', 'w')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list(names)
    assert (tmp_path / "u,p" / "new").exists()


@pytest.mark.parametrize("kind", ["rw", "tmp", "ro"])
def test_mounted_nosuid_nodev_with_the_layers_top_first(tree, kind):
    script = f"""
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] == {DEST!r}:
        print(f[5]); print(f[-1])
"""
    done = run([_overlay(tree, kind)], script)
    assert done.returncode == 0, done.stderr
    flags, options = done.stdout.split()
    assert {"nosuid", "nodev"} <= set(flags.split(","))
    opts = options.split(",")
    assert opts[0] == ("ro" if kind == "ro" else "rw")   # the superblock: no upper dir, read-only
    assert f"lowerdir=/oldroot{tree}/l2:/oldroot{tree}/l1" in opts and "userxattr" in opts
    if kind == "rw":
        assert f"upperdir=/oldroot{tree}/up" in opts and f"workdir=/oldroot{tree}/wk" in opts
    if kind == "tmp":
        assert "upperdir=/tmp-overlay-upper-0" in opts


def test_statvfs_reports_nosuid(tree):
    """nosuid (stricter than bwrap): a set-user-id bit in a layer is not honoured by exec."""
    done = run([_overlay(tree, "ro")], f"import os; print(os.statvfs({DEST!r}).f_flag & os.ST_NOSUID)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(os.ST_NOSUID)


def _pybwrap(args):
    return subprocess.run([sys.executable, "-m", "bwrap_compat", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_overlapping_dirs_give_bwraps_message_through_pybwrap(tree):
    lower = str(tree / "l1")
    done = _pybwrap(["--ro-bind", "/", "/", "--tmpfs", "/tmp", "--overlay-src", lower, "--overlay", lower,
                     str(tree / "wk"), DEST, "true"])
    assert done.returncode == 1, done
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"bwrap: Can't make overlay mount on /newroot{DEST} with options "), line
    assert line.endswith(": Overlay directories may not overlap"), line


def test_pybwrap_runs_the_overlay_family(tree):
    done = _pybwrap(["--ro-bind", "/", "/", "--tmpfs", "/tmp",
                     "--overlay-src", str(tree / "l1"), "--overlay-src", str(tree / "l2"),
                     "--overlay", str(tree / "up"), str(tree / "wk"), DEST,
                     "--overlay-src", str(tree / "l1"), "--tmp-overlay", "/tmp/t",
                     "--overlay-src", str(tree / "l1"), "--overlay-src", str(tree / "l2"), "--ro-overlay", "/tmp/r",
                     "sh", "-c", f"cat {DEST}/a /tmp/t/b /tmp/r/c && echo x > {DEST}/y && echo z > /tmp/t/z "
                                 "&& ! (echo w > /tmp/r/w) 2>/dev/null"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a from l2b from l1c from l2"
    assert (tree / "up" / "y").read_text() == "x\n" and not (tree / "up" / "z").exists()


def test_the_installed_bwrap_0_8_backend_refuses_overlays(tree):
    why = host_capability("bwrap")
    if why is not None:
        need("bwrap", why)
    info = probe.bwrap_info(probe.locate_bwrap())
    if "--overlay-src" in info.options:
        not_applicable(f"bwrap {info.version} has the overlay options")
    base = PP.Policy.default()
    policy = base.replace(fs=base.fs + (_overlay(tree, "tmp"),))
    with pytest.raises(BwrapOptionUnsupported) as exc:
        pysandbox.run(["true"], policy=policy, backend="bwrap", timeout=60)
    assert exc.value.reason is Reason.BWRAP_OPTION_UNSUPPORTED
    assert "--overlay-src" in str(exc.value) and "--tmp-overlay" in str(exc.value)
    assert pysandbox.status(policy, backend="bwrap").reason == Reason.BWRAP_OPTION_UNSUPPORTED.value
