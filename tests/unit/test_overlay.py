"""The overlay family without a sandbox: Policy validation, the plan step, the native
translation (mount options, escaping, lower order, tmp dirs, flags, ELOOP), the bwrap
rendering, the option-support refusal and the round trip through bwrap's argv."""

from __future__ import annotations

import errno
import os

import pytest

import pysandbox
from bwrap_compat import cli as bcli
from bwrap_compat import parser as bp
from bwrap_compat.mapping import to_policy
from bwrap_compat.messages import OVERLAP
from pysandbox import plan as P
from pysandbox import probe
from pysandbox.backends.bwrap import bwrap_render as B
from pysandbox.backends.bwrap import BwrapBackend
from pysandbox.backends import native as N
from pysandbox.backends.native.native_errors import setup_error
from pysandbox.errors import BackendUnavailable, BwrapOptionUnsupported, PolicyError, Reason, SetupError
from pysandbox.policy import Bind, Dir, Overlay, Policy, Tmpfs

from .test_backend_bwrap import HELP_08, Counter, fake_bwrap


@pytest.fixture
def layers(tmp_path):
    """Host directories: l1 l2 l3 (lowers), up and wk (upper and work)."""
    for name in ("l1", "l2", "l3", "up", "wk"):
        (tmp_path / name).mkdir()
    return {name: str(tmp_path / name) for name in ("l1", "l2", "l3", "up", "wk")}


def _compile(*fs, allow_host_mountpoints=False):
    return P.compile(Policy(fs=(Tmpfs("/"),) + fs), outer_ids=(1000, 1000),
                     allow_host_mountpoints=allow_host_mountpoints)


# ---------------------------------------------------------------- Policy

def test_exported_and_frozen(layers):
    assert pysandbox.Overlay is Overlay
    op = Overlay("/o", [layers["l1"], layers["l2"]])
    assert op.lower == (layers["l1"], layers["l2"]) and op.upper is None and not op.tmp
    with pytest.raises(Exception):
        op.dest = "/x"


@pytest.mark.parametrize("kwargs,reason", [
    (dict(dest="o", lower=("/a", "/b")), Reason.INVALID_PATH),
    (dict(dest="/o", lower=("/a", "b")), Reason.INVALID_PATH),
    (dict(dest="/o", lower=("/a", "/b\x00")), Reason.INVALID_PATH),
    (dict(dest="/o", lower=("/a", "/../b")), Reason.INVALID_PATH),
    (dict(dest="/o", lower=("/a",), upper="up", work="/w"), Reason.INVALID_PATH),
    (dict(dest="/o", lower=("/a",), upper="/u", work="/w\x00"), Reason.INVALID_PATH),
    (dict(dest="/o", lower=("/a",), upper="/u"), Reason.CONFLICTING_OPTIONS),
    (dict(dest="/o", lower=("/a",), work="/w"), Reason.CONFLICTING_OPTIONS),
    (dict(dest="/o", lower=("/a",), upper="/u", work="/w", tmp=True), Reason.CONFLICTING_OPTIONS),
    (dict(dest="/o", lower=("/a",)), Reason.INVALID_VALUE),            # read-only: two lowers, as bwrap
    (dict(dest="/o", lower=()), Reason.INVALID_VALUE),
    (dict(dest="/o", lower=(), tmp=True), Reason.INVALID_VALUE),
    (dict(dest="/o", lower=(), upper="/u", work="/w"), Reason.INVALID_VALUE),
    (dict(dest="/o", lower="/a"), Reason.INVALID_VALUE),               # one path is not a list of them
    (dict(dest="/o", lower=5), Reason.INVALID_VALUE),
    (dict(dest="/o", lower=("/a",), tmp="yes"), Reason.INVALID_VALUE),
])
def test_invalid_overlays_are_policy_errors(kwargs, reason):
    with pytest.raises(PolicyError) as info:
        Overlay(**kwargs)
    assert info.value.reason is reason, info.value


def test_the_smallest_valid_overlays():
    assert Overlay("/o", ("/a",), tmp=True).tmp
    assert Overlay("/o", ("/a",), "/u", "/w").writable
    assert not Overlay("/o", ("/a", "/b")).writable
    assert Overlay("//o/./p/", ("/a//b/",), tmp=True) == Overlay("/o/p", ("/a/b",), tmp=True)   # normalised


@pytest.mark.parametrize("missing", ["l2", "up", "wk"])
def test_a_missing_source_is_bind_source_missing(layers, missing):
    paths = dict(layers, **{missing: layers[missing] + "-gone"})
    op = Overlay("/o", (paths["l1"], paths["l2"]), paths["up"], paths["wk"])
    policy = Policy(fs=(Tmpfs("/"), op))   # pure data: checked when compiled, as bind sources
    with pytest.raises(PolicyError) as info:
        P.compile(policy)
    assert info.value.reason is Reason.BIND_SOURCE_MISSING and info.value.value == paths[missing]


def test_only_an_overlay_with_an_upper_dir_is_a_writable_path(layers):
    fs = (Tmpfs("/"), Overlay("/rw", (layers["l1"],), layers["up"], layers["wk"]),
          Overlay("/t", (layers["l1"],), tmp=True), Overlay("/ro", (layers["l1"], layers["l2"])))
    assert Policy(fs=fs).writable_paths == ("/rw",)


def test_bwrap_under_an_upper_dir_is_refused(tmp_path, layers):
    inside = fake_bwrap(tmp_path / "up" / "bwrap")
    policy = Policy(fs=(Tmpfs("/"), Overlay("/o", (layers["l1"],), layers["up"], layers["wk"])))
    with pytest.raises(BackendUnavailable) as info:
        BwrapBackend(str(inside)).info(P.writable_host_paths(policy))
    assert info.value.reason is Reason.BWRAP_IN_WRITABLE_PATH
    ro = Policy(fs=(Tmpfs("/"), Overlay("/o", (layers["up"], layers["l1"]))))   # a lower is not written
    assert BwrapBackend(str(inside)).info(P.writable_host_paths(ro)).path == str(inside)


# ---------------------------------------------------------------- plan

def test_mount_overlay_is_planned_at_the_ops_place(layers):
    plan = _compile(Dir("/a"), Overlay("/o", (layers["l1"], layers["l2"]), layers["up"], layers["wk"]), Dir("/b"))
    assert plan.mount_ops == (P.MountTmpfs("/"), P.MakeDir("/a"),
                              P.MountOverlay("/o", (layers["l1"], layers["l2"]), layers["up"], layers["wk"]),
                              P.MakeDir("/b"))
    names = [type(op).__name__ for op in plan.ops]
    assert names.index("MountOverlay") < names.index("PivotRoot")


def test_tmp_overlays_are_numbered_in_order(layers):
    plan = _compile(Overlay("/t0", (layers["l1"],), tmp=True), Overlay("/ro", (layers["l1"], layers["l2"])),
                    Overlay("/rw", (layers["l1"],), layers["up"], layers["wk"]),
                    Overlay("/t1", (layers["l2"],), tmp=True))
    got = {op.dest: op.tmp_index for op in plan.mount_ops if isinstance(op, P.MountOverlay) and op.tmp}
    assert got == {"/t0": 0, "/t1": 1}


def test_mount_points_inside_an_overlay(layers, tmp_path):
    (tmp_path / "l1" / "there").mkdir()
    rw = Overlay("/o", (layers["l1"],), layers["up"], layers["wk"])
    _compile(rw, Tmpfs("/o/there"))              # exists in a layer: fine
    with pytest.raises(PolicyError) as info:
        _compile(rw, Tmpfs("/o/missing"))        # would be made in the upper dir, on the host
    assert info.value.reason is Reason.MOUNT_POINT_MISSING
    _compile(rw, Tmpfs("/o/missing"), allow_host_mountpoints=True)   # pybwrap: as bwrap
    ro = Overlay("/o", (layers["l1"], layers["l2"]))
    with pytest.raises(PolicyError) as info:
        _compile(ro, Tmpfs("/o/missing"), allow_host_mountpoints=True)   # EROFS otherwise
    assert info.value.reason is Reason.MOUNT_POINT_MISSING
    _compile(Overlay("/o", (layers["l1"],), tmp=True), Tmpfs("/o/missing"))   # on the tmpfs upper
    with pytest.raises(PolicyError) as info:   # the overlay's own mount point, inside a host bind
        P.compile(Policy(fs=(Bind("/", "/", readonly=True), Overlay("/nonexistent-psb/o", (layers["l1"],),
                                                                        tmp=True))))
    assert info.value.reason is Reason.MOUNT_POINT_MISSING


def test_host_path_sees_the_topmost_layer(layers, tmp_path):
    (tmp_path / "l1" / "f").write_text("1")
    (tmp_path / "l2" / "f").write_text("2")
    (tmp_path / "l1" / "g").write_text("1")
    (tmp_path / "up" / "g").write_text("u")
    plan = _compile(Overlay("/o", (layers["l1"], layers["l2"]), layers["up"], layers["wk"]))
    assert P.host_path("/o/f", plan.mount_ops)[0] == layers["l2"] + "/f"
    assert P.host_path("/o/g", plan.mount_ops)[0] == layers["up"] + "/g"
    assert P.host_path("/o/none", plan.mount_ops)[0] is None


def test_mount_options_longer_than_a_page_are_refused_before_launch(tmp_path):
    long = tmp_path / ("x" * 250)
    long.mkdir()
    many = (str(long),) * (P.MOUNT_DATA_MAX // 250 + 1)
    with pytest.raises(PolicyError) as info:
        _compile(Overlay("/o", many, tmp=True))
    assert info.value.reason is Reason.INVALID_VALUE
    _compile(Overlay("/o", many[:2], tmp=True))   # control: a short list is fine


# ---------------------------------------------------------------- native translation

def _mounts(plan):
    return [op for op in N.translate(plan, base="/tmp") if op.stage == "overlay"]


def test_native_options_reverse_the_lowers_and_escape(tmp_path):
    names = ("a,b", "c:d", "e\\f")
    for name in names + ("u,p", "w:k"):
        (tmp_path / name).mkdir()
    lower = tuple(str(tmp_path / n) for n in names)
    plan = _compile(Overlay("/o", lower, str(tmp_path / "u,p"), str(tmp_path / "w:k")))
    (mount,) = [op for op in _mounts(plan) if op.kind == "MOUNT"]
    t = str(tmp_path)
    assert mount.d == (f"upperdir=/oldroot{t}/u\\,p,workdir=/oldroot{t}/w\\:k,"
                       f"lowerdir=/oldroot{t}/e\\\\f:/oldroot{t}/c\\:d:/oldroot{t}/a\\,b,userxattr")
    assert (mount.a, mount.b, mount.c) == ("overlay", "/newroot/o", "overlay")
    assert mount.n == N.MS_NOSUID | N.MS_NODEV    # stricter than bwrap (no flags)
    assert mount.reason is Reason.SETUP_FAILED and mount.filename == "/o"


def test_native_read_only_overlay(layers):
    plan = _compile(Overlay("/o", (layers["l1"], layers["l2"], layers["l3"])))
    (mount,) = [op for op in _mounts(plan) if op.kind == "MOUNT"]
    assert mount.d == f"lowerdir=/oldroot{layers['l3']}:/oldroot{layers['l2']}:/oldroot{layers['l1']},userxattr"


def test_native_tmp_overlay_makes_its_dirs_on_the_setup_tmpfs(layers):
    plan = _compile(Overlay("/t0", (layers["l1"],), tmp=True), Overlay("/t1", (layers["l2"],), tmp=True))
    ops = _mounts(plan)
    assert [(op.kind, op.b if op.kind != "CHECK_PATH" else op.a) for op in ops] == [
        ("MKDIRS", "/newroot/t0"), ("MKDIRS", "/tmp-overlay-upper-0"), ("MKDIRS", "/tmp-overlay-work-0"),
        ("CHECK_PATH", f"/oldroot{layers['l1']}"), ("MOUNT", "/newroot/t0"),
        ("MKDIRS", "/newroot/t1"), ("MKDIRS", "/tmp-overlay-upper-1"), ("MKDIRS", "/tmp-overlay-work-1"),
        ("CHECK_PATH", f"/oldroot{layers['l2']}"), ("MOUNT", "/newroot/t1")]
    assert ops[4].d == f"upperdir=/tmp-overlay-upper-0,workdir=/tmp-overlay-work-0,lowerdir=/oldroot{layers['l1']}," \
                       "userxattr"
    assert all(op.mode == 0o755 for op in ops if op.b and op.b.startswith("/tmp-overlay-"))


def test_native_overlay_parents_are_made_as_bwrap_makes_them(layers):
    ops = _mounts(_compile(Overlay("/a/b/o", (layers["l1"],), tmp=True)))
    assert (ops[0].kind, ops[0].b, ops[0].m) == ("MKDIRS", "/newroot/a/b/o", 0o700)   # no perms: 0700 parents


def test_eloop_is_bwraps_overlap_message(layers):
    plan = _compile(Overlay("/o", (layers["l1"],), layers["up"], layers["wk"]))
    ops = N.translate(plan, base="/tmp")
    packed = N.pack(plan, ops)
    i = next(k for k, op in enumerate(ops) if op.kind == "MOUNT" and op.stage == "overlay")
    exc = setup_error(packed, N.STAGE_OP, i, errno.ELOOP, "x", plan.namespaces)
    assert isinstance(exc, SetupError) and exc.reason is Reason.SETUP_FAILED
    assert (exc.stage, exc.errno, exc.filename) == ("overlay", errno.ELOOP, "/o")
    assert "Overlay directories may not overlap" in str(exc) and "Too many levels" not in str(exc)
    assert bcli.bwrap_message(exc) == (f"Can't make overlay mount on /newroot/o with options {ops[i].d}: "
                                       "Overlay directories may not overlap")
    other = setup_error(packed, N.STAGE_OP, i, errno.EPERM, "x", plan.namespaces)
    assert "Operation not permitted" in str(other) and OVERLAP not in str(other)
    assert bcli.bwrap_message(other).endswith(": Operation not permitted")


# ---------------------------------------------------------------- bwrap backend

def test_bwrap_rendering(layers):
    plan = _compile(Overlay("/rw", (layers["l1"], layers["l2"]), layers["up"], layers["wk"]),
                    Overlay("/t", (layers["l1"],), tmp=True), Overlay("/ro", (layers["l2"], layers["l3"])))
    argv = B.flatten(B.render(plan, Counter()))
    rw = ["--overlay-src", layers["l1"], "--overlay-src", layers["l2"], "--overlay", layers["up"], layers["wk"], "/rw"]
    tmp = ["--overlay-src", layers["l1"], "--tmp-overlay", "/t"]
    ro = ["--overlay-src", layers["l2"], "--overlay-src", layers["l3"], "--ro-overlay", "/ro"]
    start = argv.index("--overlay-src")
    assert argv[start:start + len(rw) + len(tmp) + len(ro)] == rw + tmp + ro


@pytest.mark.parametrize("kind", ["--overlay", "--tmp-overlay", "--ro-overlay"])
def test_bwrap_0_8_lacks_the_overlay_options(tmp_path, layers, kind):
    fake = fake_bwrap(tmp_path / "bwrap", HELP_08 + "    --disable-userns               Disable\n")
    op = {"--overlay": Overlay("/o", (layers["l1"],), layers["up"], layers["wk"]),
          "--tmp-overlay": Overlay("/o", (layers["l1"],), tmp=True),
          "--ro-overlay": Overlay("/o", (layers["l1"], layers["l2"]))}[kind]
    with pytest.raises(BwrapOptionUnsupported) as info:
        BwrapBackend(str(fake)).check(_compile(op))
    assert info.value.reason is Reason.BWRAP_OPTION_UNSUPPORTED
    assert "--overlay-src" in str(info.value) and kind in str(info.value)
    # control: without the overlay no overlay option is needed
    assert not {"--overlay-src", kind} & B.options_used(B.render(_compile(), Counter(), probe=True))


def test_bwrap_0_11_help_has_them(tmp_path, layers):
    extra = "".join(f"    {o} X               x\n" for o in ("--overlay-src", "--overlay", "--tmp-overlay",
                                                             "--ro-overlay", "--disable-userns"))
    fake = fake_bwrap(tmp_path / "bwrap", HELP_08 + extra, "bubblewrap 0.11.0")
    used = B.options_used(B.render(_compile(Overlay("/o", (layers["l1"],), tmp=True)), Counter(), probe=True))
    assert {"--overlay-src", "--tmp-overlay"} <= used <= probe.bwrap_info(str(fake)).options


# ---------------------------------------------------------------- round trip through bwrap's argv

def test_policy_to_bwrap_argv_to_policy_is_the_identity(layers, tmp_path):
    (tmp_path / "l1" / "sub").mkdir()
    overlays = (Overlay("/rw", (layers["l1"], layers["l2"]), layers["up"], layers["wk"]),
                Overlay("/t", (layers["l3"],), tmp=True), Overlay("/ro", (layers["l2"], layers["l3"], layers["l1"])),
                Overlay("/t/in", (layers["l1"],), tmp=True))
    policy = Policy(fs=(Tmpfs("/"),) + overlays)
    fds = []

    def store(data):   # the seccomp programs travel through descriptors, as in a launch
        fd = os.memfd_create("psb-overlay-test")
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        fds.append(fd)
        return fd

    try:
        argv = B.flatten(B.render(P.compile(policy), store))
        args = bp.check(bp.parse(argv + ["--", "true"], close_fd=lambda fd: None), real_uid=1000, real_gid=1000,
                        userns_try=True)
        parsed, _ = to_policy(args, real_uid=1000, start_caps=frozenset(), cgroup_ns=True)
    finally:
        for fd in fds:
            os.close(fd)
    assert tuple(op for op in parsed.fs if isinstance(op, Overlay)) == overlays
    ours = P.compile(policy).mount_ops
    theirs = P.compile(parsed).mount_ops
    assert [op for op in theirs if isinstance(op, P.MountOverlay)] == \
        [op for op in ours if isinstance(op, P.MountOverlay)]
