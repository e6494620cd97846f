"""Plan -> C op array translation and the error mapping of the native backend.

Pure: no clone, no privileges (the cffi module is only used to check the enum
mirror, when it is built)."""

from __future__ import annotations

import errno
from dataclasses import replace

import pytest

from tests.support import need

from pysandbox import plan as P
from pysandbox import policy as PP
from pysandbox.backends import landlock
from pysandbox.backends import native as N
from pysandbox.backends.native.native_errors import setup_error
from pysandbox.backends.native_ops import BWRAP_PROC_RO
from pysandbox.errors import CapabilityUnavailable, Reason, UserNamespaceUnavailable


def _plan(**kw):
    pol = PP.Policy.default(**kw) if "fs" not in kw else PP.Policy(**kw)
    return P.compile(pol, outer_ids=(1000, 1000))


def kinds(ops):
    return [op.kind for op in ops]


def test_default_policy_order():
    plan = _plan()
    ops = N.translate(plan, base="/tmp", last_cap=40)
    k = kinds(ops)
    assert k[:3] == ["IDMAP", "SETUP_ROOT", "PDEATHSIG"]
    # privileges come after the last mount; setsid in the init (as bwrap), before the split
    for before, after in (("PIVOT", "LOOPBACK"), ("LOOPBACK", "DISABLE_USERNS"), ("DISABLE_USERNS", "CAPS"),
                          ("CAPS", "NNP"), ("NNP", "SETSID"), ("SETSID", "INIT"), ("INIT", "CHDIR")):
        assert k.index(before) < k.index(after), (before, after, k)
    assert k[-1] == "CHDIR"
    last_mount = max(i for i, op in enumerate(ops) if op.kind in ("BIND", "MOUNT", "SETATTR"))
    assert last_mount < k.index("PIVOT")
    # a /dev: setup as root of the new namespace (as bwrap), nested map back to 1000
    assert ops[0].b == "0 1000 1\n" and ops[0].c == "0 1000 1\n" and ops[0].a == "deny"
    nested = next(op for op in ops if op.kind == "DISABLE_USERNS")
    assert (nested.a, nested.b, nested.n) == ("1000 0 1\n", "1000 0 1\n", 1)
    assert ops[1].flags & N.F_USERNS_FDS


def test_bind_paths_are_in_the_setup_view():
    ops = N.translate(_plan(), base="/tmp")
    root = next(op for op in ops if op.kind == "BIND")
    assert (root.a, root.b) == ("/oldroot", "/newroot")
    assert root.flags & N.F_RO and not root.flags & N.F_DEV
    assert root.c is None   # mount_setattr path: no submount list


def test_proc_is_expanded_with_readonly_rebinds_and_its_own_reason():
    ops = N.translate(_plan(), base="/tmp")
    proc = next(op for op in ops if op.kind == "MOUNT" and op.c == "proc")
    assert proc.reason is Reason.PROC_MOUNT_FAILED and proc.b == "/newroot/proc"
    # right after it, only bwrap's own covering (where writable); every PROC_READONLY entry
    # at the tail, after the mount namespace of its own, before the capability drop
    rebinds = [op for op in ops if op.kind == "BIND" and op.a.startswith("/newroot/proc/")]
    assert [op.a for op in rebinds] == [f"/newroot/proc/{s}" for s in BWRAP_PROC_RO]
    assert all(op.flags & N.F_RO and op.flags & N.F_IF_WRITABLE for op in rebinds)
    kinds = [op.kind for op in ops]
    covers = [op.b for op in ops if op.kind == "RO_COVER"]
    assert covers == [f"/proc/{s}" for s in N.PROC_RO]
    assert kinds.index("PIVOT") < kinds.index("MOUNT_PRIVATE") < kinds.index("RO_COVER") < kinds.index("CAPS")


def test_minimal_dev():
    ops = N.translate(_plan(), base="/tmp", dev_nodes=("null", "tty"))
    dev_binds = [(op.a, op.b, op.flags) for op in ops if op.kind == "BIND" and op.a.startswith("/oldroot/dev/")]
    assert dev_binds == [("/oldroot/dev/null", "/newroot/dev/null", N.F_DEV),
                         ("/oldroot/dev/tty", "/newroot/dev/tty", N.F_DEV)]
    links = {op.b: op.a for op in ops if op.kind == "SYMLINK"}
    assert links["/newroot/dev/ptmx"] == "pts/ptmx" and links["/newroot/dev/fd"] == "/proc/self/fd"
    pts = next(op for op in ops if op.kind == "MOUNT" and op.c == "devpts")
    assert "newinstance" in pts.d and "ptmxmode=0666" in pts.d


def test_hide_and_tmpfs(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (tmp_path / "file").write_text("x")
    plan = _plan(hide=[str(secret), str(tmp_path / "file")], tmpfs=["/mnt"], ro=[str(tmp_path)])
    ops = N.translate(plan, base="/tmp")
    hid = [op for op in ops if op.kind == "MOUNT" and op.b == f"/newroot{secret}"]
    assert len(hid) == 1 and hid[0].d == "mode=0"
    assert any(op.kind == "SETATTR" and op.b == f"/newroot{secret}" and op.flags & N.F_RO for op in ops)
    wf = next(op for op in ops if op.kind == "WRITE")
    assert wf.flags & N.F_BIND and wf.flags & N.F_RO and wf.flags & N.F_MODE and wf.mode == 0 and wf.n == 0
    assert wf.d.startswith("/.psb-file-")
    # no MKDIRS for destinations that exist in a host bind; a tmpfs on /mnt exists on the host too
    assert not any(op.kind == "MKDIRS" and op.b == f"/newroot{secret}" for op in ops)


def test_fallback_lists_submounts():
    plan = _plan()
    points = ["/", "/proc", "/sys", "/sys/fs/cgroup", "/home/a b"]
    ops = N.translate(plan, base="/tmp", fallback=True, mountpoints=points)
    root = next(op for op in ops if op.kind == "BIND")
    assert root.c == b"/newroot/proc\0/newroot/sys\0/newroot/sys/fs/cgroup\0/newroot/home/a b\0\0"
    assert N.submount_list(points, "/sys", "/newroot/x") == b"/newroot/x/fs/cgroup\0\0"


def test_caps_mask_and_seccomp_alignment():
    prog = b"\x06\x00\x00\x00\x00\x00\xff\x7f"   # ret ALLOW
    plan = _plan(caps_keep=frozenset({"net_raw", "sys_admin"}), seccomp=(prog,), hostname="box")
    ops = N.translate(plan, base="/tmp", last_cap=40)
    caps = next(op for op in ops if op.kind == "CAPS")
    assert caps.n == (1 << 13) | (1 << 21) and caps.m == 40
    packed = N.pack(plan, ops)
    i = next(i for i, op in enumerate(ops) if op.kind == "SECCOMP")
    off = packed.offsets[i][0]
    assert off % 8 == 0 and packed.strtab[off:off + 8] == prog
    host = next(i for i, op in enumerate(ops) if op.kind == "HOSTNAME")
    off = packed.offsets[host][0]
    assert packed.strtab[off:off + 4] == b"box\0"


def test_as_pid_1_has_no_init_and_flags():
    plan = _plan(as_pid_1=True)
    ops = N.translate(plan, base="/tmp")
    assert "INIT" not in kinds(ops)
    packed = N.pack(plan, ops)
    assert not packed.want_status
    want = sum(N.CLONE_FLAGS[n] for n in ("user", "mount", "pid", "ipc", "uts", "net"))
    assert packed.clone_flags == want
    allow = _plan(network="allow")
    assert not N.pack(allow, N.translate(allow)).clone_flags & N.CLONE_FLAGS["net"]
    assert "LOOPBACK" not in kinds(N.translate(allow))


def test_nested_userns_switch():
    pol = PP.Policy.default(allow_nested_userns=True, uid=1000, gid=1000)
    plan = P.compile(pol.replace(fs=tuple(op for op in pol.fs if not isinstance(op, PP.Dev))),
                     outer_ids=(1000, 1000))
    ops = N.translate(plan)
    assert "DISABLE_USERNS" not in kinds(ops) and not ops[1].flags & N.F_USERNS_FDS
    # with a /dev the setup ids (root) differ from the sandbox's: nest only (n=0), as bwrap
    ops = N.translate(_plan(allow_nested_userns=True))
    nest = [op for op in ops if op.kind == "DISABLE_USERNS"]
    assert [op.n for op in nest] == [0] and ops[1].flags & N.F_USERNS_FDS


def test_every_plan_op_is_translated(tmp_path):
    src = tmp_path / "d"
    src.mkdir()
    pol = PP.Policy(fs=(PP.Tmpfs("/"), PP.Bind(str(src), "/src", readonly=True), PP.Dir("/d", mode=0o700),
                        PP.Symlink("d", "/l"), PP.File("/f", data=b"hi", mode=0o600), PP.Mqueue("/mq"),
                        PP.RemountRo("/src"), PP.Chmod("/d", 0o750)))
    ops = N.translate(P.compile(pol))
    assert {"MKDIRS", "BIND", "SYMLINK", "WRITE", "MOUNT", "SETATTR", "CHMOD"} <= set(kinds(ops))
    w = next(op for op in ops if op.kind == "WRITE")
    assert (w.a, w.n, w.m, w.mode, w.b) == (b"hi", 2, -1, 0o600, "/newroot/f")


def test_error_mapping():
    plan = _plan()
    ops = N.translate(plan)
    packed = N.pack(plan, ops)
    exc = setup_error(packed, N.STAGE_EXEC, -1, errno.ENOENT, "nope", plan.namespaces)
    assert isinstance(exc, FileNotFoundError) and exc.filename == "nope"
    assert isinstance(setup_error(packed, N.STAGE_EXEC, -1, errno.EACCES, "x", plan.namespaces), PermissionError)
    i = next(i for i, op in enumerate(ops) if op.kind == "MOUNT" and op.c == "proc")
    exc = setup_error(packed, N.STAGE_OP, i, errno.EPERM, "x", plan.namespaces)
    assert isinstance(exc, CapabilityUnavailable) and exc.reason is Reason.PROC_MOUNT_FAILED
    assert (exc.stage, exc.errno, exc.filename, exc.op) == ("proc", errno.EPERM, "/proc", ops[i].plan_index)
    assert isinstance(plan.ops[exc.op], P.MountProc)
    i = next(i for i, op in enumerate(ops) if op.kind == "LOOPBACK")
    assert setup_error(packed, N.STAGE_OP, i, errno.EPERM, "x", plan.namespaces).reason is \
        Reason.LOOPBACK_SETUP_FAILED
    i = next(i for i, op in enumerate(ops) if op.kind == "IDMAP")
    assert isinstance(setup_error(packed, N.STAGE_OP, i, errno.EPERM, "x", plan.namespaces), UserNamespaceUnavailable)
    died = setup_error(packed, N.STAGE_PARENT_DIED, 2, errno.ESRCH, "x", plan.namespaces)
    assert died.reason is Reason.PARENT_DIED
    i = next(i for i, op in enumerate(ops) if op.kind == "BIND")
    bind = setup_error(packed, N.STAGE_OP, i, errno.EINVAL, "x", plan.namespaces)
    assert bind.reason is Reason.SETUP_FAILED and bind.stage == "bind" and bind.filename == "/"


def test_op_enum_mirrors_the_c_header():
    """The Python op names and flags are the module's (generated from psb.h). Without a
    module this skips, and under PYSANDBOX_MUST_WORK=1 fails: it cannot pass unchecked."""
    from pysandbox.backends import _native_lib
    try:
        ffi, lib = N.load_module()
    except Exception as exc:  # noqa: BLE001 - the module is optional for unit tests
        need("native_module", f"pysandbox._native cannot be loaded: {exc}")
    assert _native_lib.module_drift(lib) == []
    assert sorted(n[len("PSB_OP_"):] for n in dir(lib) if n.startswith("PSB_OP_")) == sorted(N.OP)
    assert lib.PSB_ABI_VERSION == _native_lib.ABI_VERSION
    for name, value in N.OP.items():
        assert getattr(lib, f"PSB_OP_{name}") == value
    assert (lib.PSB_F_RO, lib.PSB_F_DEV, lib.PSB_F_OPTIONAL, lib.PSB_F_BIND, lib.PSB_F_MODE,
            lib.PSB_F_USERNS_FDS) == (N.F_RO, N.F_DEV, N.F_OPTIONAL, N.F_BIND, N.F_MODE, N.F_USERNS_FDS)
    assert (lib.PSB_STAGE_OP, lib.PSB_STAGE_CLONE, lib.PSB_STAGE_PARENT_DIED, lib.PSB_STAGE_FDS,
            lib.PSB_STAGE_EXEC) == (N.STAGE_OP, N.STAGE_CLONE, N.STAGE_PARENT_DIED, N.STAGE_FDS, N.STAGE_EXEC)


def test_parent_modes_follow_bwrap():
    # bwrap 0.8: 0755, minus group (other) bits the op's mode lacks; binds etc. carry mode 0
    assert [N.parent_mode(p) for p in (-1, 0, 0o600, 0o644, 0o750, 0o705)] == \
        [0o755, 0o700, 0o700, 0o755, 0o750, 0o705]
    pol = PP.Policy(fs=(PP.Tmpfs("/"), PP.Symlink("x", "/s/l"), PP.File("/f/g", data=b"", mode=0o640),
                        PP.Dir("/d/e")))
    ops = N.translate(P.compile(pol, outer_ids=(1000, 1000)))
    made = {op.b: (op.mode, op.m) for op in ops if op.kind == "MKDIRS"}
    assert made["/newroot/s"] == (0o700, 0o700) and made["/newroot/f"] == (0o750, 0o750)
    assert made["/newroot/d/e"] == (-1, 0o755)


def test_setsid_in_the_init_only_with_an_init():
    k = kinds(N.translate(_plan(as_pid_1=True)))
    assert "INIT" not in k and k.index("SECCOMP") < k.index("SETSID") < k.index("CHDIR")
    k = kinds(N.translate(_plan(new_session=False)))
    assert "SETSID" not in k


def test_landlock_right_after_the_init_only_with_landlock_and_an_init():
    """The command's Landlock domain (native/psb_landlock.h) comes right after INIT, in
    the command's process, after NNP (the kernel's condition); the C side makes the
    init dumpable only when it sees it. No Landlock on the host: no LANDLOCK op, the init
    as before. No init of ours (as_pid_1, no pid namespace): the filesystem domain alone
    (landlock.fs_kind) at the same point, before the first seccomp filter, so a read-only
    descriptor is not reopened for writing there either
    (tests/security/test_reopen_descriptors.py::test_no_init_plans_refuse_the_reopen_too)."""
    ops = N.translate(_plan(), landlock_abi=1)
    k = kinds(ops)
    assert k.index("NNP") < k.index("INIT") and k.index("LANDLOCK") == k.index("INIT") + 1
    assert k.index("LANDLOCK") < k.index("SECCOMP")
    assert ops[k.index("LANDLOCK")].n == landlock.FS
    assert "LANDLOCK" not in kinds(N.translate(_plan()))          # the host lacks it
    no_pid = PP.Policy.default().replace(namespaces=frozenset({"user", "ipc", "uts"}))
    for plan in (_plan(as_pid_1=True), P.compile(no_pid, outer_ids=(1000, 1000))):
        for abi in (1, 7):
            ops = N.translate(plan, landlock_abi=abi)
            k = kinds(ops)
            assert "INIT" not in k and k.count("LANDLOCK") == 1
            assert k.index("NNP") < k.index("LANDLOCK") < k.index("SECCOMP")
            assert ops[k.index("LANDLOCK")].n == landlock.FS   # no signal scope: no init to guard
        assert "LANDLOCK" not in kinds(N.translate(plan))      # the host lacks it
    may_mount = P.compile(no_pid.replace(allow_nested_userns=True), outer_ids=(1000, 1000))
    assert "LANDLOCK" not in kinds(N.translate(may_mount, landlock_abi=7))   # a domain would forbid mount
    # A session's server (Plan.launch_domain False): none at launch, its commands take theirs
    assert "LANDLOCK" not in kinds(N.translate(replace(_plan(as_pid_1=True), launch_domain=False), landlock_abi=7))


@pytest.mark.parametrize("kw", [{"allow_nested_userns": True}, {"caps_keep": ("sys_admin",)}])
def test_a_command_that_may_mount_gets_the_signal_scope_or_no_domain(kw):
    """A filesystem domain forbids mount: a command that may mount gets the signal-scoped
    one (ABI 6), and on an older Landlock none (its init stays undumpable); every other
    command gets the signal-scoped one too where the kernel has it."""
    plan = _plan(**kw)
    assert plan.command_may_mount
    ops = N.translate(plan, landlock_abi=6)
    assert [op.n for op in ops if op.kind == "LANDLOCK"] == [landlock.SIGNAL]
    assert "LANDLOCK" not in kinds(N.translate(plan, landlock_abi=5))
    # One rule for every command: the signal scope wherever the kernel has it (a
    # command that could signal its keeper could hold its own end), with the filesystem
    # rules for a command that cannot mount (SIGNAL_FS), else the filesystem kind alone.
    assert [op.n for op in N.translate(_plan(), landlock_abi=6) if op.kind == "LANDLOCK"] == [landlock.SIGNAL_FS]
    assert [op.n for op in N.translate(_plan(), landlock_abi=5) if op.kind == "LANDLOCK"] == [landlock.FS]
    assert [op.a for op in ops if op.kind == "LANDLOCK"] == [None]   # the signal kind: no write rules


def test_landlock_write_rules_beneath_the_writable_destinations_only():
    """A filesystem domain grants writing beneath each writable mount of the plan
    (native/psb_landlock.h): the workdir, /tmp, /dev, /proc here; not the read-only
    root, a read-only bind, a hidden path, a mount a later one covers, nor one remounted
    read-only at its destination."""
    ops = (P.BindMount("/", "/", readonly=True), P.BindMount("/w", "/w"), P.MountTmpfs("/tmp"),
           P.BindMount("/r", "/r", readonly=True), P.MountTmpfs("/h", readonly=True),
           P.MountTmpfs("/covered"), P.BindMount("/x", "/covered", readonly=True),
           P.MountTmpfs("/later-ro"), P.RemountReadonly("/later-ro"), P.MountProc("/proc"), P.MinimalDev("/dev"),
           P.MountOverlay("/ov", lower=("/l",), tmp=True), P.MountOverlay("/ro-ov", lower=("/l",)),
           P.WriteFile("/f", data=b"", bind=True), P.WriteFile("/rf", data=b"", bind=True, readonly=True),
           P.MountMqueue("/dev/mqueue"), P.MountTmpfs("/tmp"))
    assert landlock.writable_destinations(ops) == ("/w", "/proc", "/dev", "/ov", "/f", "/dev/mqueue", "/tmp")
    assert landlock.writable_destinations((P.BindMount("/", "/"),)) == ("/",)   # pybwrap --bind / /
    # a minimal /dev remounted read-only (not recursive): its own mounts stay writable
    dev = (P.MinimalDev("/dev"), P.RemountReadonly("/dev"), P.RemountReadonly("/dev/tty"), P.MountTmpfs("/dev/pts"))
    assert landlock.writable_destinations(dev) == ("/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                                   "/dev/urandom", "/dev/pts")
    assert landlock.path_list(("/w", "/tmp")) == b"/w\0/tmp\0\0" and landlock.path_list(()) == b"\0"
    policy = PP.Policy.default(workdir="/tmp")
    plan = P.compile(policy, outer_ids=(1000, 1000))
    op = next(op for op in N.translate(plan, landlock_abi=6) if op.kind == "LANDLOCK")
    assert op.n == landlock.SIGNAL_FS and op.a == landlock.path_list(landlock.writable_destinations(plan.ops))
    assert {"/tmp", "/proc", "/dev"} <= set(landlock.writable_destinations(plan.ops))
    assert "/" not in landlock.writable_destinations(plan.ops)


def test_userns_block_fd_waits_instead_of_writing_maps():
    ops = N.translate(_plan(userns_block_fd=7), base="/tmp", last_cap=40)
    k = kinds(ops)
    assert "IDMAP" not in k
    assert k[:3] == ["WAIT_FD", "SETUP_ROOT", "PDEATHSIG"]
    assert ops[0].n == 7 and ops[0].flags & N.F_LIFELINE
    # the nested namespace keeps whatever ids the caller mapped
    nested = next(op for op in ops if op.kind == "DISABLE_USERNS")
    assert nested.flags & N.F_CURRENT_IDS
    # without die_with_parent the launcher's death does not end the wait
    ops = N.translate(_plan(userns_block_fd=7, die_with_parent=False), base="/tmp", last_cap=40)
    assert not ops[0].flags & N.F_LIFELINE
    # nested namespaces allowed: no nested namespace at all (no id change of ours)
    ops = N.translate(_plan(userns_block_fd=7, allow_nested_userns=True), base="/tmp", last_cap=40)
    assert "DISABLE_USERNS" not in kinds(ops)


def test_block_fd_waits_after_the_privilege_drop_before_the_init():
    ops = N.translate(_plan(block_fd=9), base="/tmp", last_cap=40)
    k = kinds(ops)
    wait = k.index("WAIT_FD")
    assert ops[wait].n == 9
    assert k.index("NNP") < wait < k.index("SECCOMP") and wait < k.index("INIT")
    assert k[:2] == ["IDMAP", "SETUP_ROOT"]


def test_joining_namespaces_makes_the_new_ones_inside_them():
    plan = _plan(userns_fd=5, pidns_fd=6, allow_nested_userns=True)
    ops = N.translate(plan, base="/tmp", last_cap=40)
    k = kinds(ops)
    assert k[:6] == ["SETNS", "SETNS", "HOP", "UNSHARE", "HOP", "SETUP_ROOT"]
    assert (ops[0].n, ops[0].m) == (5, N.CLONE_FLAGS["user"]) and (ops[1].n, ops[1].m) == (6, N.CLONE_FLAGS["pid"])
    flags = ops[3].n
    assert not flags & N.CLONE_FLAGS["user"]                       # joined, not made
    assert flags & N.CLONE_FLAGS["pid"] and flags & N.CLONE_FLAGS["mount"]
    assert "IDMAP" not in k                                        # the joined namespace has its maps
    assert N.pack(plan, ops).clone_flags == 0                      # the clone makes nothing
    # user namespace only, no new pid namespace: one unshare (with user absent), no hop
    k = kinds(N.translate(_plan(userns_fd=5, allow_nested_userns=True, namespaces={"user", "ipc"}),
                          base="/tmp", last_cap=40))
    assert k[:3] == ["SETNS", "UNSHARE", "SETUP_ROOT"] and "HOP" not in k


def test_userns2_after_hostname_before_the_drop_and_without_ambient_caps():
    ops = N.translate(_plan(userns2_fd=8, hostname="h"), base="/tmp", last_cap=40)
    k = kinds(ops)
    at = next(i for i, op in enumerate(ops) if op.kind == "SETNS" and op.n == 8)
    assert k.index("PIVOT") < k.index("LOOPBACK") < k.index("HOSTNAME") < at < k.index("CAPS")
    assert ops[k.index("CAPS")].flags & N.F_NO_AMBIENT
    plain = N.translate(_plan(), base="/tmp", last_cap=40)
    assert not next(op for op in plain if op.kind == "CAPS").flags & N.F_NO_AMBIENT


def test_the_children_holding_a_namespace_reference_are_held_weakly():
    """The at-fork table (pysandbox/backends/native/__init__.py ``_holding``, no weakref
    module): a child holding a reference is listed until collected; control: one that
    holds none (mntns_fd -1) is never listed, one still referenced stays."""
    import gc
    held = N.NativeChild(pid=1, status_fd=-1, mntns_fd=987654)   # a number only: never closed here
    kept = N.NativeChild(pid=2, status_fd=-1, mntns_fd=987655)
    none = N.NativeChild(pid=3, status_fd=-1)
    key, kept_key = id(held), id(kept)
    assert N._holding[key]() is held and N._holding[kept_key]() is kept and id(none) not in N._holding
    del held
    gc.collect()
    assert key not in N._holding and N._holding[kept_key]() is kept
    del N._holding[kept_key]   # drop it without the fork hook closing a number it never opened
