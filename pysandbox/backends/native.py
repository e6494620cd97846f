"""The native backend: the plan compiled to a flat C op array, run by the cffi executor.

Per plan (once, cached): :func:`translate` turns the :class:`~pysandbox.plan.Plan`
into a list of :class:`COp` (kind, flags, string offsets a-d, numbers n/m/mode) and
one string table; every path is already absolute in the setup view (sources under
``/oldroot``, destinations under ``/newroot``) and every multi-step kernel action
(minimal /dev, /proc with its read-only re-binds) is expanded into primitive ops, so
the C side stays a small switch. Per launch only argv, envp and stdio are filled in.

The C child (``native/psb_child.c``) walks the array after ``clone``: no Python, no malloc.
A failed step sends ``{stage, op index, errno}`` through a close-on-exec pipe; here
:func:`setup_error` maps it, in one table, to the typed error naming the plan step
and the path. EOF on the pipe means the command was executed.

Processes: the setup child is cloned into the new namespaces and, where it can,
shares the caller's memory (CLONE_VM, no page-table copy) until it execs. With a pid
namespace it becomes pid 1: it clones the command's process and then execs the
freestanding init of ``native/psb_init.c`` (embedded at build time, exec'd from a
sealed execute-only memfd), so no sandbox process keeps the caller's memory; the
command waits for that exec before running anything. Where the init cannot be exec'd
(``PYSANDBOX_NATIVE_NO_EXEC_INIT=1``, memfd exec forbidden), the init is a private
copy of the caller (fork mode, slower, made undumpable). Clones happen on the main
thread or on persistent launcher threads, because PR_SET_PDEATHSIG follows the
cloning thread: die-with-parent then means the process.

Adding an op: add ``PSB_OP_X`` to the enum in ``native/psb.h`` and to the cdef in
``native/build_native.py`` (``= ...``), a ``case`` in ``psb_child_main``, and emit
``COp(X, ...)`` in :func:`translate` with its stage name (and reason, if it has its
own). Ops are position-independent records, so new ones never disturb old ones.
"""

from __future__ import annotations

import errno as E
import os
import threading
from dataclasses import dataclass, field

from .. import plan as P
from ..errors import (CapabilityUnavailable, NativeModuleMissing, NetworkNamespaceUnavailable, Reason,
                      SetupError, UserNamespaceUnavailable, error_for)
from ..execpath import exec_candidates
from ..policy import CAPABILITIES, Policy, Proc
from .base import BackendStatus, CapabilityStatus, Launch

NO_MOUNT_SETATTR_ENV = "PYSANDBOX_NATIVE_NO_MOUNT_SETATTR"

CLONE_FLAGS = {"user": 0x10000000, "mount": 0x00020000, "pid": 0x20000000, "net": 0x40000000,
               "ipc": 0x08000000, "uts": 0x04000000, "cgroup": 0x02000000}
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8

# Op kinds, flags and the loader: pysandbox/backends/_native_lib.py (the module's ABI).
from ._native_lib import (F_BIND, F_CURRENT_IDS, F_DEV, F_IF_WRITABLE, F_LIFELINE, F_MODE,  # noqa: E402,F401
                          F_NO_AMBIENT, F_NOFOLLOW, F_OPTIONAL, F_RO, F_USERNS_FDS, FORWARDED_SIGNAL_MASK,
                          OP, OP_KINDS, PROBE_CLONE, PROBE_IDMAP, PROBE_LOOPBACK, PROBE_PROC, STAGE_CLONE,
                          STAGE_EXEC, STAGE_FDS, STAGE_OP, STAGE_PARENT_DIED, STAGE_PIPE, NO_EXEC_INIT_ENV, _load,
                          has_mount_setattr, init_fd)

DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"))
PROC_RO = P.PROC_READONLY
BWRAP_PROC_RO = ("sys", "sysrq-trigger", "irq", "bus")   # bwrap's own covering, where writable
OVERLAP = "Overlay directories may not overlap"   # bwrap's message for an overlay mount's ELOOP


# ---------------------------------------------------------------- plan -> op array

@dataclass
class COp:
    """One C op. String fields are Python values here; :class:`Compiled` turns them
    into string-table offsets."""

    kind: str
    flags: int = 0
    a: object = None
    b: object = None
    c: object = None
    d: object = None
    n: int = 0
    m: int = -1
    mode: int = -1
    stage: str = ""            # SetupError.stage when this op fails
    plan_index: int | None = None
    reason: Reason = Reason.SETUP_FAILED
    filename: str | None = None


@dataclass
class Compiled:
    """A plan translated for the C executor (pure data; no cffi)."""

    ops: list
    strtab: bytes
    offsets: list              # per op: (a, b, c, d) offsets or -1
    clone_flags: int
    no_mount_setattr: bool
    want_status: bool
    keep: list = field(default_factory=list)   # cffi objects kept alive with the plan


class _Strings:
    def __init__(self):
        self.buf = bytearray()
        self.seen: dict = {}

    def add(self, value) -> int:
        if value is None:
            return -1
        data = value if isinstance(value, (bytes, bytearray)) else os.fsencode(value) + b"\0"
        key = bytes(data)
        got = self.seen.get(key)
        if got is not None:
            return got
        while len(self.buf) % 8:    # seccomp programs need aligned sock_filter arrays
            self.buf.append(0)
        off = len(self.buf)
        self.buf += key
        self.seen[key] = off
        return off


def _in(root: str, path: str) -> str:
    return root if path == "/" else root + path


def _sub_list(mountpoints, src: str, dst: str) -> bytes:
    """The mount points strictly below host path ``src``, as setup paths below ``dst``
    (NUL-separated, empty-terminated) for the remount fallback."""
    src = src.rstrip("/") or "/"
    out = []
    for mp in mountpoints:
        if src == "/":
            if mp == "/":
                continue
            rel = mp
        elif mp.startswith(src + "/"):
            rel = mp[len(src):]
        else:
            continue
        out.append(os.fsencode(dst + rel) + b"\0")
    return b"".join(out) + b"\0"


def read_mountpoints(path: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points of the caller's mount namespace, in mount order."""
    points = []
    with open(path, "rb") as f:
        for line in f:
            fields = line.split(b" ")
            raw = fields[4].decode("utf-8", "surrogateescape")
            points.append(raw.encode("latin-1", "ignore").decode("unicode_escape")
                          if "\\" in raw else raw)
    return points


def cap_last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return len(CAPABILITIES) - 1


def setup_base() -> str:
    """A directory of the host to mount the setup tmpfs on (in our own mount namespace)."""
    for cand in ("/tmp", "/run", "/mnt", "/var/tmp"):
        if os.path.isdir(cand) and not os.path.islink(cand):
            return cand
    return "/tmp"


def parent_mode(perms: int) -> int:
    """The mode bwrap 0.8 gives the missing parents of a destination it creates:
    0755 without the group (other) bits when the op's mode has no group (other) bits.
    ``perms``: the op's mode; -1 for a dir/file/tmpfs without one; 0 for binds,
    symlinks, proc, dev and mqueue (bwrap keeps no mode for those: 0700 parents);
    bind-data defaults to 0600. Checked against /usr/bin/bwrap 0.8.0."""
    mode = 0o755
    if perms >= 0 and not perms & 0o070:
        mode &= ~0o050
    if perms >= 0 and not perms & 0o007:
        mode &= ~0o005
    return mode


def translate(plan: P.Plan, *, base: str = "/tmp", last_cap: int = 40, fallback: bool = False,
              mountpoints=(), dev_nodes=DEV_NODES) -> list[COp]:
    """The C ops for ``plan``. Pure: every host fact comes in as an argument.

    Raises:
        PolicyError: never for a compiled plan (a bug otherwise).
    """
    ops: list[COp] = []
    policy = plan.policy
    ns = plan.namespaces
    done: list = []
    disable_userns = plan.first(P.DisableUserns) is not None
    init_needed = "pid" in ns and not policy.as_pid_1
    init_done = False
    new_session = plan.first(P.NewSession)
    # Id maps as bwrap: with a /dev (devpts is mounted as root) setup runs as root of
    # the new user namespace, else as the sandbox's ids; a nested user namespace then
    # maps the sandbox's ids onto the setup's, also whenever nested ones are disabled.
    ids = plan.idmap
    has_dev = plan.first(P.MinimalDev) is not None
    ns_uid, ns_gid = (0, 0) if has_dev else (ids.uid, ids.gid)
    nest = disable_userns or (ns_uid, ns_gid) != (ids.uid, ids.gid)
    caller_maps = ids.block_fd is not None   # then the nested namespace keeps the caller's ids
    if caller_maps or ids.joined:
        nest = disable_userns
    nested_flags = F_CURRENT_IDS if caller_maps else 0

    def need_dir(dest, i, stage, perms=-1):
        host, _ = P.host_path(dest, done)
        if dest != "/" and host is None:
            ops.append(COp("MKDIRS", b=_in("/newroot", dest), m=parent_mode(perms), stage=stage, plan_index=i,
                           filename=dest))

    def need_parent(dest, i, stage, perms=-1):
        parent = os.path.dirname(dest)
        if parent and parent != "/" and P.host_path(parent, done)[0] is None:
            pm = parent_mode(perms)
            ops.append(COp("MKDIRS", b=_in("/newroot", parent), mode=pm, m=pm, stage=stage, plan_index=i,
                           filename=parent))

    for i, op in enumerate(plan.ops):
        if init_needed and not init_done and isinstance(op, (P.Seccomp, P.NewSession, P.Chdir)):
            if new_session is not None:
                # As bwrap: setsid in the pid-1 init before the command's process is
                # made, so the command is in session 1 and is not a session leader.
                ops.append(COp("SETSID", stage="new_session", plan_index=plan.ops.index(new_session)))
            ops.append(COp("INIT", stage="init", plan_index=i))
            init_done = True
        if isinstance(op, P.Unshare):
            continue
        if isinstance(op, P.JoinNamespaces):
            ops.extend(_join_ops(op, ns, i))
        elif isinstance(op, P.IdMap) and op.joined:   # the joined namespace has its maps
            ops.append(COp("SETUP_ROOT", a=base, stage="setup_root", plan_index=i, filename=base))
        elif isinstance(op, P.EnterUserns2):
            ops.append(COp("SETNS", n=op.fd, m=CLONE_FLAGS["user"], stage="userns2", plan_index=i,
                           filename=f"descriptor {op.fd}"))
        elif isinstance(op, P.IdMap) and op.block_fd is not None:
            # bwrap --userns-block-fd: no maps of ours; the caller writes them while we wait.
            ops.append(COp("WAIT_FD", flags=F_LIFELINE if policy.die_with_parent else 0, n=op.block_fd,
                           stage="userns_block_fd", plan_index=i, filename=f"descriptor {op.block_fd}"))
            ops.append(COp("SETUP_ROOT", flags=F_USERNS_FDS if nest else 0, a=base,
                           stage="setup_root", plan_index=i, filename=base))
        elif isinstance(op, P.IdMap):
            ops.append(COp("IDMAP", a="deny", b=f"{ns_uid} {op.outer_uid} 1\n",
                           c=f"{ns_gid} {op.outer_gid} 1\n", stage="idmap", plan_index=i,
                           reason=Reason.USER_NAMESPACE_UNAVAILABLE, filename="/proc/self/uid_map"))
            ops.append(COp("SETUP_ROOT", flags=F_USERNS_FDS if nest else 0, a=base,
                           stage="setup_root", plan_index=i, filename=base))
        elif isinstance(op, P.PdeathSig):
            ops.append(COp("PDEATHSIG", stage="pdeathsig", plan_index=i))
        elif isinstance(op, P.BindMount):
            dst = _in("/newroot", op.dest)
            if op.src_fd is not None:
                src = f"/oldroot/proc/self/fd/{op.src_fd}"
                is_dir = True
                try:
                    import stat as _st
                    is_dir = _st.S_ISDIR(os.fstat(op.src_fd).st_mode)
                except OSError:
                    pass
            else:
                src = _in("/oldroot", op.src)
                is_dir = os.path.isdir(op.src)
            if is_dir:
                need_dir(op.dest, i, "bind", 0)
            elif P.host_path(op.dest, done)[0] is None:
                ops.append(COp("MKFILE", b=dst, m=parent_mode(0), stage="bind", plan_index=i, filename=op.dest))
            subs = _sub_list(mountpoints, op.src, dst) if fallback and op.src is not None else None
            flags = (F_RO if op.readonly else 0) | (F_DEV if op.dev else 0) | (F_OPTIONAL if op.optional else 0)
            ops.append(COp("BIND", flags=flags, a=src, b=dst, c=subs, stage="bind", plan_index=i,
                           m=op.src_fd if op.src_fd is not None else -1,
                           filename=op.src if op.src is not None else op.dest))
        elif isinstance(op, P.MountTmpfs):
            need_dir(op.dest, i, "tmpfs", -1 if op.mode is None else op.mode)
            mode = 0o755 if op.mode is None else op.mode
            data = f"mode={mode:o}" + (f",size={op.size}" if op.size is not None else "")
            # A hidden directory that vanished from the host since the plan was made has
            # nothing left to hide: ENOENT is not an error for a hide.
            hide = op.readonly and op.mode == P.HIDE_MODE and P.host_path(op.dest, done)[0] is not None
            ops.append(COp("MOUNT", flags=F_OPTIONAL if hide else 0, a="tmpfs", b=_in("/newroot", op.dest),
                           c="tmpfs", d=data, n=MS_NOSUID | MS_NODEV, stage="tmpfs", plan_index=i,
                           filename=op.dest))
            if op.readonly:
                ops.append(COp("SETATTR", flags=F_RO | (F_OPTIONAL if hide else 0), b=_in("/newroot", op.dest),
                               stage="tmpfs", plan_index=i, filename=op.dest))
        elif isinstance(op, P.MountOverlay):
            need_dir(op.dest, i, "overlay", 0)   # bwrap keeps no mode for it: 0700 parents
            if op.tmp:
                # As bwrap: the writable layers live on the setup tmpfs (our / until the
                # pivot), invisible from the sandbox and gone with it.
                for layer in ("upper", "work"):
                    ops.append(COp("MKDIRS", b=f"/tmp-overlay-{layer}-{op.tmp_index}", mode=0o755, stage="overlay",
                                   plan_index=i, filename=op.dest))
            # The kernel resolves the layers' paths itself (following symlinks): each is
            # first checked to resolve without one, as a bind source is (canonical in
            # the Policy). A swap racing this check and the mount is not caught.
            for layer in op.lower + ((op.upper, op.work) if op.upper is not None else ()):
                ops.append(COp("CHECK_PATH", a=_in("/oldroot", layer), stage="overlay", plan_index=i,
                               filename=layer))
            # nosuid,nodev: stricter than bwrap (which passes no flags), as for our binds.
            ops.append(COp("MOUNT", a="overlay", b=_in("/newroot", op.dest), c="overlay", d=op.data,
                           n=MS_NOSUID | MS_NODEV, stage="overlay", plan_index=i, filename=op.dest))
        elif isinstance(op, P.MountProc):
            need_dir(op.dest, i, "proc", 0)
            dst = _in("/newroot", op.dest)
            ops.append(COp("MOUNT", a="proc", b=dst, c="proc", n=MS_NOSUID | MS_NODEV | MS_NOEXEC,
                           stage="proc", plan_index=i, reason=Reason.PROC_MOUNT_FAILED, filename=op.dest))
            # Always read-only (a missing entry is skipped): bwrap's "only where
            # access(W_OK) succeeds" never covers /proc/sys, whose 0555 directory
            # hides files that kuid 0 may write (plan.PROC_READONLY). A proc mount that a
            # later mount covers is unreachable: it gets only bwrap's own covering (where
            # access(W_OK) succeeds), so both backends show the same mount table.
            hidden = P.shadowed(i, plan.ops)
            for sub in BWRAP_PROC_RO if hidden else PROC_RO:
                ops.append(COp("BIND", flags=F_RO | F_OPTIONAL | (F_IF_WRITABLE if hidden else 0),
                               a=f"{dst}/{sub}", b=f"{dst}/{sub}",
                               c=b"\0" if fallback else None, stage="proc", plan_index=i,
                               filename=f"{op.dest.rstrip('/')}/{sub}"))
        elif isinstance(op, P.MinimalDev):
            need_dir(op.dest, i, "dev", 0)
            dst = _in("/newroot", op.dest)
            ops.append(COp("MOUNT", a="tmpfs", b=dst, c="tmpfs", d="mode=755", n=MS_NOSUID | MS_NODEV,
                           stage="dev", plan_index=i, filename=op.dest))
            for node in dev_nodes:
                ops.append(COp("MKFILE", b=f"{dst}/{node}", stage="dev", plan_index=i, filename=f"/dev/{node}"))
                ops.append(COp("BIND", flags=F_DEV, a=f"/oldroot/dev/{node}", b=f"{dst}/{node}",
                               c=b"\0" if fallback else None, stage="dev", plan_index=i,
                               filename=f"/dev/{node}"))
            for name, target in DEV_LINKS:
                ops.append(COp("SYMLINK", a=target, b=f"{dst}/{name}", stage="dev", plan_index=i,
                               filename=f"{op.dest}/{name}"))
            ops.append(COp("MKDIRS", b=f"{dst}/shm", stage="dev", plan_index=i, filename=f"{op.dest}/shm"))
            ops.append(COp("MKDIRS", b=f"{dst}/pts", stage="dev", plan_index=i, filename=f"{op.dest}/pts"))
            ops.append(COp("MOUNT", a="devpts", b=f"{dst}/pts", c="devpts", n=MS_NOSUID | MS_NOEXEC,
                           d="newinstance,ptmxmode=0666,mode=620", stage="dev", plan_index=i,
                           filename=f"{op.dest}/pts"))
            ops.append(COp("SYMLINK", a="pts/ptmx", b=f"{dst}/ptmx", stage="dev", plan_index=i,
                           filename=f"{op.dest}/ptmx"))
        elif isinstance(op, P.MountMqueue):
            need_dir(op.dest, i, "mqueue", 0)
            ops.append(COp("MOUNT", a="mqueue", b=_in("/newroot", op.dest), c="mqueue", n=0,
                           stage="mqueue", plan_index=i, filename=op.dest))
        elif isinstance(op, P.MakeDir):
            ops.append(COp("MKDIRS", flags=F_MODE if op.mode is not None else 0, b=_in("/newroot", op.dest),
                           mode=-1 if op.mode is None else op.mode,
                           m=parent_mode(-1 if op.mode is None else op.mode), stage="dir", plan_index=i,
                           filename=op.dest))
        elif isinstance(op, P.MakeSymlink):
            need_parent(op.dest, i, "symlink", 0)
            ops.append(COp("SYMLINK", a=op.target, b=_in("/newroot", op.dest), stage="symlink",
                           plan_index=i, filename=op.dest))
        elif isinstance(op, P.WriteFile):
            need_parent(op.dest, i, "file", op.mode if op.mode is not None else (0o600 if op.bind else -1))
            hide = op.bind and op.readonly and op.mode == P.HIDE_MODE and not op.data and op.fd is None \
                and P.host_path(op.dest, done)[0] is not None
            flags = (F_BIND if op.bind else 0) | (F_RO if op.readonly else 0) | \
                    (F_MODE if op.mode is not None else 0) | (F_OPTIONAL if hide else 0)
            data = op.data if op.data is not None else b""
            ops.append(COp("WRITE", flags=flags, a=bytes(data) if data else None, n=len(data),
                           m=op.fd if op.fd is not None else -1, b=_in("/newroot", op.dest),
                           d=f"/.psb-file-{i}" if op.bind else None,
                           mode=-1 if op.mode is None else op.mode, stage="file", plan_index=i,
                           filename=op.dest))
        elif isinstance(op, P.RemountReadonly):
            ops.append(COp("SETATTR", flags=F_RO, b=_in("/newroot", op.dest), stage="remount_ro",
                           plan_index=i, filename=op.dest))
        elif isinstance(op, P.ChangeMode):
            ops.append(COp("CHMOD", b=_in("/newroot", op.dest), mode=op.mode, stage="chmod",
                           plan_index=i, filename=op.dest))
        elif isinstance(op, P.PivotRoot):
            ops.append(COp("PIVOT", stage="pivot_root", plan_index=i))
        elif isinstance(op, P.LoopbackUp):
            ops.append(COp("LOOPBACK", stage="loopback", plan_index=i, reason=Reason.LOOPBACK_SETUP_FAILED,
                           filename="lo"))
        elif isinstance(op, P.SetHostname):
            ops.append(COp("HOSTNAME", a=op.name, stage="hostname", plan_index=i))
        elif isinstance(op, P.DisableUserns):
            ops.append(COp("DISABLE_USERNS", flags=nested_flags, n=1, a=f"{ids.uid} {ns_uid} 1\n", b=f"{ids.gid} {ns_gid} 1\n",
                           stage="disable_userns", plan_index=i, filename="/proc/sys/user/max_user_namespaces"))
        elif isinstance(op, P.DropCapabilities):
            if nest and not disable_userns:   # n=0: only the nested namespace, as bwrap
                ops.append(COp("DISABLE_USERNS", flags=nested_flags, n=0, a=f"{ids.uid} {ns_uid} 1\n", b=f"{ids.gid} {ns_gid} 1\n",
                               stage="nested_userns", plan_index=i))
            mask = 0
            for name in op.keep:
                mask |= 1 << CAPABILITIES.index(name)
            # After userns2 the uid may be unmapped there: exec decides what survives, as bwrap.
            no_ambient = F_NO_AMBIENT if plan.first(P.EnterUserns2) is not None else 0
            ops.append(COp("CAPS", flags=no_ambient, n=mask, m=last_cap, stage="capabilities", plan_index=i))
        elif isinstance(op, P.NoNewPrivs):
            ops.append(COp("NNP", stage="no_new_privs", plan_index=i))
        elif isinstance(op, P.Seccomp):
            ops.append(COp("SECCOMP", a=bytes(op.program), n=len(op.program), stage="seccomp", plan_index=i))
        elif isinstance(op, P.NewSession):
            if not init_needed:   # else done in the init, above
                ops.append(COp("SETSID", stage="new_session", plan_index=i))
        elif isinstance(op, P.WaitFd):
            ops.append(COp("WAIT_FD", n=op.fd, stage="block_fd", plan_index=i, filename=f"descriptor {op.fd}"))
        elif isinstance(op, P.Chdir):
            # The policy's own workdir (bound on its canonical host path): no symlink
            # may be followed on the way (one planted since the Policy was built).
            workdir = any(isinstance(b, P.BindMount) and b.src is not None and b.src == b.dest == op.path
                          for b in plan.ops)
            ops.append(COp("CHDIR", flags=F_NOFOLLOW if workdir else 0, a=op.path, stage="chdir", plan_index=i,
                           filename=op.path))
        else:  # pragma: no cover - plan.compile only emits the ops above
            raise SetupError(f"the native backend has no op for {op!r}", Reason.SETUP_FAILED, stage="translate")
        if isinstance(op, P.MOUNT_OPS):
            done.append(op)
    if init_needed and not init_done:   # unreachable while every plan ends with Chdir
        ops.append(COp("INIT", stage="init", plan_index=len(plan.ops)))
    return ops


def _join_ops(op: P.JoinNamespaces, ns, i: int) -> list[COp]:
    """Given namespaces first, then the new ones made inside them (the clone makes none:
    a namespace made at clone time would belong to the caller's user namespace).
    Joining or making a pid namespace only places our children in it: each time setup
    continues in a new child (HOP), which the launcher waits for instead."""
    out = []
    if op.userns_fd is not None:
        out.append(COp("SETNS", n=op.userns_fd, m=CLONE_FLAGS["user"], stage="join_userns", plan_index=i,
                       filename=f"descriptor {op.userns_fd}"))
    if op.pidns_fd is not None:
        out.append(COp("SETNS", n=op.pidns_fd, m=CLONE_FLAGS["pid"], stage="join_pidns", plan_index=i,
                       filename=f"descriptor {op.pidns_fd}"))
        out.append(COp("HOP", stage="join_pidns", plan_index=i))
    flags = 0
    for name in ns:
        if not (name == "user" and op.userns_fd is not None):
            flags |= CLONE_FLAGS[name]
    out.append(COp("UNSHARE", n=flags, stage="unshare", plan_index=i))
    if "pid" in ns:
        out.append(COp("HOP", stage="unshare", plan_index=i))
    return out


def pack(plan: P.Plan, ops: list[COp], *, fallback: bool = False) -> Compiled:
    """Lay ``ops`` out as string-table offsets (pure)."""
    strings = _Strings()
    offsets = []
    for op in ops:
        offsets.append(tuple(strings.add(getattr(op, f)) for f in "abcd"))
    flags = 0
    if plan.first(P.JoinNamespaces) is None:   # else the child unshares after joining (_join_ops)
        for name in plan.namespaces:
            flags |= CLONE_FLAGS[name]
    init = any(op.kind == "INIT" for op in ops)
    return Compiled(ops=ops, strtab=bytes(strings.buf) + b"\0", offsets=offsets, clone_flags=flags,
                    no_mount_setattr=fallback, want_status=init)


# ---------------------------------------------------------------- errors: the one mapping table

_CLONE_ERRNOS = (E.EPERM, E.EINVAL, E.ENOSPC, E.EUSERS, E.EACCES)
_NS_ERROR = {
    "user": (UserNamespaceUnavailable, Reason.USER_NAMESPACE_UNAVAILABLE),
    "mount": (CapabilityUnavailable, Reason.MOUNT_NAMESPACE_UNAVAILABLE),
    "pid": (CapabilityUnavailable, Reason.PID_NAMESPACE_UNAVAILABLE),
    "net": (NetworkNamespaceUnavailable, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
}
_HINT = {"user": "user namespaces are disabled or exhausted here (user.max_user_namespaces, "
                 "kernel.unprivileged_userns_clone, AppArmor restrict_unprivileged_userns)"}


def namespace_error(namespaces, err: int):
    """The error for a clone that failed with ``err``: which namespace, found by
    retrying each alone in a throwaway child (only on this failure path)."""
    ffi, lib = _load()
    if err in _CLONE_ERRNOS:
        culprit = None
        if lib.psb_probe(CLONE_FLAGS["user"], PROBE_IDMAP) != 0:   # clone, or usable at all
            culprit = "user"
        else:
            for name in ("mount", "pid", "net", "ipc", "uts", "cgroup"):
                if name in namespaces and lib.psb_probe(CLONE_FLAGS["user"] | CLONE_FLAGS[name], PROBE_CLONE):
                    culprit = name
                    break
        if culprit in _NS_ERROR:
            cls, reason = _NS_ERROR[culprit]
            hint = _HINT.get(culprit, f"cannot create a {culprit} namespace here")
            if culprit == "user" and lib.psb_probe(CLONE_FLAGS["user"], PROBE_CLONE) == 0:
                hint = ("a user namespace can be created but the caller's ids cannot be mapped in it "
                        "(e.g. uid 0 without CAP_SETFCAP, inside another sandbox)")
            return cls(f"clone: {os.strerror(err)}: {hint}", reason, errno=err)
        if culprit is not None:
            return SetupError(f"clone: cannot create a {culprit} namespace: {os.strerror(err)}",
                              Reason.SETUP_FAILED, stage="clone", errno=err)
    return SetupError(f"clone failed: {os.strerror(err)}", Reason.SETUP_FAILED, stage="clone", errno=err)


def setup_error(compiled: Compiled, stage: int, index: int, err: int, launch_exe: str, namespaces):
    """The typed error for a record from the child (or a parent-side failure)."""
    if stage == STAGE_CLONE:
        return namespace_error(namespaces, err)
    if stage == STAGE_EXEC:
        if err == E.ENOENT:
            return FileNotFoundError(err, os.strerror(err), launch_exe)
        if err == E.EACCES:
            return PermissionError(err, os.strerror(err), launch_exe)
        return OSError(err, os.strerror(err), launch_exe)
    if stage == STAGE_PARENT_DIED:
        return SetupError("the launching thread died during setup", Reason.PARENT_DIED,
                          stage="pdeathsig", errno=err)
    if stage == STAGE_FDS:
        return SetupError(f"descriptor setup failed: {os.strerror(err)}", Reason.SETUP_FAILED,
                          stage="descriptors", errno=err)
    if stage == STAGE_OP and 0 <= index < len(compiled.ops):
        op = compiled.ops[index]
        where = f" {op.filename}" if op.filename else ""
        if op.reason is Reason.USER_NAMESPACE_UNAVAILABLE:
            # The namespace was created but cannot be used (no id map may be written,
            # e.g. uid 0 inside a sandbox without CAP_SETFCAP).
            return UserNamespaceUnavailable(f"{op.stage}{where}: {os.strerror(err)}: the new user namespace "
                                            "cannot map the caller's ids here", op.reason, errno=err)
        hint = ""
        if op.kind == "SETNS" and err == E.EINVAL and op.m == CLONE_FLAGS["user"]:
            hint = " (joining the user namespace failed; it might not be a descendant of the current one)"
        if op.stage == "overlay" and op.kind == "MOUNT":
            # bwrap's words: ELOOP's own ("Too many levels of symbolic links") says nothing here.
            detail = OVERLAP if err == E.ELOOP else os.strerror(err)
            exc = SetupError(f"overlay{where}: {detail} (options {op.d}) (plan step {op.plan_index}, "
                             f"native op {index} {op.kind})", op.reason, stage=op.stage, op=op.plan_index,
                             errno=err, filename=op.filename)
            exc.mount_options = op.d   # for pybwrap's message
            return exc
        if err == E.ELOOP and op.kind in ("BIND", "CHDIR", "CHECK_PATH") or err == E.EXDEV and op.kind == "BIND":
            # A host path of the policy resolved without following symlinks (canonical
            # when the Policy was built): a symlink there now was swapped in since.
            return SetupError(f"{op.stage}{where}: a symbolic link is in the path, or the path changed since the "
                              f"policy was built ({os.strerror(err)}); nothing was bound (plan step {op.plan_index}, "
                              f"native op {index} {op.kind})", Reason.SYMLINK_IN_PATH, stage=op.stage,
                              op=op.plan_index, errno=err, filename=op.filename)
        message = (f"{op.stage}{where}: {os.strerror(err)}{hint} "
                   f"(plan step {op.plan_index}, native op {index} {op.kind})")
        if op.reason is Reason.SETUP_FAILED:
            return SetupError(message, op.reason, stage=op.stage, op=op.plan_index, errno=err, filename=op.filename)
        # proc_mount_failed, loopback_setup_failed: the class errors.error_for gives the
        # reason (CapabilityUnavailable), with the step's details as attributes too.
        exc = error_for(op.reason, message, errno=err, stage=op.stage, op=op.plan_index, filename=op.filename)
        exc.stage, exc.op, exc.filename = op.stage, op.plan_index, op.filename
        return exc
    return SetupError(f"setup failed (stage {stage}): {os.strerror(err) if err else 'no report'}",
                      Reason.SETUP_FAILED, stage="pipe", errno=err)


# ---------------------------------------------------------------- the backend

class NativeChild:
    """The launched sandbox: ``pid`` is its outermost process (pid 1 of its pid
    namespace, or the command itself with as_pid_1)."""

    def __init__(self, pid: int, status_fd: int):
        self.pid = pid
        self._status_fd = status_fd

    def returncode(self, wait_status: int) -> int:
        """The command's returncode: the init reports the command's raw wait status
        on the status pipe (a pid 1 cannot die of most signals); without a report
        (the init itself was killed) the init's own status counts."""
        fd = self._status_fd
        if fd >= 0:
            try:
                data = os.read(fd, 4)
            except (BlockingIOError, OSError):
                data = b""
            if len(data) == 4:
                return os.waitstatus_to_exitcode(int.from_bytes(data, "little", signed=True))
        return os.waitstatus_to_exitcode(wait_status)

    def close(self) -> None:
        fd, self._status_fd = self._status_fd, -1
        if fd >= 0:
            os.close(fd)


class _Ready:
    """A compiled plan turned into cffi structures (kept alive together)."""

    def __init__(self, ffi, compiled: Compiled, exec_init: int = -1):
        self.compiled = compiled
        self.exec_init = exec_init
        n = len(compiled.ops)
        self.ops = ffi.new("struct psb_op[]", max(n, 1))
        for i, (op, (a, b, c, d)) in enumerate(zip(compiled.ops, compiled.offsets)):
            o = self.ops[i]
            o.kind = OP[op.kind]
            o.flags = op.flags
            o.a, o.b, o.c, o.d = a, b, c, d
            o.n, o.m, o.mode = op.n, op.m, op.mode
        self.strtab = ffi.new("char[]", compiled.strtab)
        self.plan = ffi.new("struct psb_plan *")
        self.plan.ops = self.ops
        self.plan.nops = n
        self.plan.strtab = self.strtab
        self.plan.clone_flags = compiled.clone_flags
        self.plan.no_mount_setattr = int(compiled.no_mount_setattr)
        # Exec-init mode only makes sense with an init (pid namespace, not as_pid_1).
        self.plan.init_fd = exec_init if compiled.want_status else -1
        # Without an init the setup child execs the command itself: it may share our
        # memory until then (unless fork mode is forced).
        forced_fork = os.environ.get(NO_EXEC_INIT_ENV) == "1"
        self.plan.share_memory = int(exec_init >= 0 if compiled.want_status else not forced_fork)


def _spawn_reporting(lib, plan, launch, res, on_start) -> int:
    """psb_spawn, with ``on_start(pid)`` called on a helper thread as soon as the child
    exists (the executor writes its pid to a pipe right after the clone, or after the
    last hop). The setup waits until ``on_start`` has returned (a byte on the release
    pipe), so what it reads of the child (its namespaces) is there even for a command
    that exits at once, as bwrap's parent reads them before releasing its child. An
    exception from ``on_start`` kills the child instead and is raised once psb_spawn
    returns."""
    r, w = os.pipe2(os.O_CLOEXEC)
    release_r, release_w = os.pipe2(os.O_CLOEXEC)
    failed: list = []
    started: list = []

    def report():
        data = b""
        while len(data) < 4:
            chunk = os.read(r, 4 - len(data))
            if not chunk:
                return
            data += chunk
        pid = int.from_bytes(data, "little", signed=True)
        started.append(pid)
        try:
            on_start(pid)
            os.write(release_w, b"\0")
        except BaseException as exc:   # noqa: BLE001 - re-raised in the launching thread
            failed.append(exc)
            try:
                os.kill(pid, 9)   # our own child, not yet reaped: the pid is still ours
            except ProcessLookupError:
                pass

    reader = threading.Thread(target=report, name="pysandbox-on-start", daemon=True)
    reader.start()
    launch.started_fd, launch.release_fd = w, release_r
    try:
        rc = lib.psb_spawn(plan, launch, res)
    finally:
        os.close(w)
        reader.join()
        for fd in (r, release_r, release_w):
            os.close(fd)
    if failed:
        if rc == 0:
            os.waitpid(res.pid, 0)
            if res.status_fd >= 0:
                os.close(res.status_fd)
        raise failed[0]
    return rc


class NativeBackend:
    """Runs plans with the cffi executor. One instance per process (get_backend)."""

    name = "native"

    def __init__(self):
        self._ready: dict = {}
        self._checked: dict = {}
        self._lock = threading.Lock()

    # -- per plan -------------------------------------------------------------------

    def _prepare(self, plan) -> _Ready:
        fallback = os.environ.get(NO_MOUNT_SETATTR_ENV) == "1"
        exec_init = init_fd()
        key = (plan, fallback, exec_init, os.environ.get(NO_EXEC_INIT_ENV) == "1")
        with self._lock:
            ready = self._ready.get(key)
        if ready is not None:
            return ready
        ffi, lib = _load()
        if not fallback and not has_mount_setattr():
            fallback = True
        ops = translate(plan, base=setup_base(), last_cap=cap_last_cap(), fallback=fallback,
                        mountpoints=read_mountpoints() if fallback else (),
                        dev_nodes=tuple(n for n in DEV_NODES if os.path.exists(f"/dev/{n}")))
        ready = _Ready(ffi, pack(plan, ops, fallback=fallback), exec_init)
        with self._lock:
            if len(self._ready) > 256:
                self._ready.clear()
            self._ready[key] = ready
        return ready

    def check(self, plan) -> None:
        """Raise the typed error if this backend cannot run ``plan`` here. Cached per
        set of namespaces for the life of the process (one throwaway clone).

        Raises:
            NativeModuleMissing: pysandbox._native cannot be imported.
            UserNamespaceUnavailable, CapabilityUnavailable, NetworkNamespaceUnavailable:
                the namespaces the plan needs cannot be created here.
        """
        ffi, lib = _load()
        ready = self._prepare(plan)
        if plan.first(P.JoinNamespaces) is not None:
            return   # nothing to probe by cloning: joining given namespaces fails (typed) at setup
        flags = ready.compiled.clone_flags
        with self._lock:
            known = self._checked.get(flags, None)
        if known is None:
            err = lib.psb_probe(flags, PROBE_IDMAP)
            known = 0 if err == 0 else err
            with self._lock:
                self._checked[flags] = known
        if known:
            raise namespace_error(plan.namespaces, known)

    # -- per launch -----------------------------------------------------------------

    def spawn(self, plan, launch: Launch) -> NativeChild:
        """Start the sandbox; returns once the command was executed.

        Raises:
            NativeModuleMissing: no compiled module.
            UserNamespaceUnavailable, CapabilityUnavailable: clone failed (which
                namespace is found by retrying each alone).
            SetupError: a setup step failed (``.stage``, ``.op``, ``.errno``,
                ``.filename``; reason setup_failed, proc_mount_failed,
                loopback_setup_failed or parent_died). The command never ran.
            FileNotFoundError, PermissionError, OSError: the command cannot be executed.
        """
        ffi, lib = _load()
        ready = self._prepare(plan)
        policy = plan.policy
        argv = list(launch.argv)
        exe = launch.executable or argv[0]
        if policy.argv0 is not None:
            argv[0] = policy.argv0
        argbuf = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
        env = dict(launch.env)
        env["PWD"] = (plan.first(P.Chdir) or P.Chdir("/")).path   # as bwrap: PWD is the new cwd (D1)
        envbuf = b"\0".join(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()) + b"\0"
        cands = exec_candidates(exe, env.get("PATH"), env["PWD"])
        keep = [ffi.new("char[]", argbuf), ffi.new("char[]", envbuf),
                ffi.new("char[]", b"".join(os.fsencode(c) + b"\0" for c in cands)), None,
                ffi.new("int[]", list(launch.pass_fds) or [0]),
                ffi.new("int[]", list(launch.close_in_setup) or [0])]
        L = ffi.new("struct psb_launch *")
        L.argbuf, L.argc = keep[0], len(argv)
        L.envbuf, L.envc = keep[1], len(env)
        L.cand, L.ncand, L.searched = keep[2], len(cands), int("/" not in exe)
        L.fwd_signals = FORWARDED_SIGNAL_MASK
        L.stdio = [launch.stdin, launch.stdout, launch.stderr]
        L.pass_fds, L.npass = keep[4], len(launch.pass_fds)
        L.want_status = int(ready.compiled.want_status)
        L.started_fd = L.release_fd = -1
        L.close_first, L.nclose = keep[5], len(launch.close_in_setup)
        res = ffi.new("struct psb_result *")
        if launch.on_start is None:
            rc = lib.psb_spawn(ready.plan, L, res)
        else:
            rc = _spawn_reporting(lib, ready.plan, L, res, launch.on_start)
        if rc != 0:
            err = setup_error(ready.compiled, res.stage, res.op, res.err, exe, plan.namespaces)
            raise err from OSError(res.err, os.strerror(res.err) if res.err else "")
        if res.status_fd >= 0:
            os.set_blocking(res.status_fd, False)
        return NativeChild(res.pid, res.status_fd)

    # -- status ---------------------------------------------------------------------

    def status(self, policy=None) -> BackendStatus:
        """What the native backend can do here, probed one capability at a time in
        throwaway children (never cached: status is not on the launch path).

        Raises:
            Nothing: a missing module is reported as native_module_missing.
        """
        return probe_native(policy)


def probe_native(policy=None) -> BackendStatus:
    """Native capabilities, one by one: user, mount, pid, net namespaces, a /proc mount
    in a new pid namespace, loopback up in a new network namespace.

    Raises:
        Nothing: problems are reported in the returned status.
    """
    policy = policy if policy is not None else Policy.default()
    try:
        ffi, lib = _load()
    except NativeModuleMissing as exc:
        return BackendStatus("native", False, Reason.NATIVE_MODULE_MISSING.value, str(exc.args[0]))
    user = CLONE_FLAGS["user"]
    checks = (
        ("user", user, PROBE_IDMAP, Reason.USER_NAMESPACE_UNAVAILABLE),
        ("mount", user | CLONE_FLAGS["mount"], PROBE_CLONE, Reason.MOUNT_NAMESPACE_UNAVAILABLE),
        ("pid", user | CLONE_FLAGS["pid"], PROBE_CLONE, Reason.PID_NAMESPACE_UNAVAILABLE),
        ("net", user | CLONE_FLAGS["net"], PROBE_CLONE, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
        ("proc", user | CLONE_FLAGS["mount"] | CLONE_FLAGS["pid"], PROBE_PROC, Reason.PROC_MOUNT_FAILED),
        ("loopback", user | CLONE_FLAGS["net"], PROBE_LOOPBACK, Reason.LOOPBACK_SETUP_FAILED),
    )
    caps: dict[str, CapabilityStatus] = {}
    for name, flags, what, reason in checks:
        err = lib.psb_probe(flags, what)
        caps[name] = CapabilityStatus(name, err == 0, None if err == 0 else reason.value,
                                      "" if err == 0 else os.strerror(err))
    deny_ok = caps["net"].available and caps["loopback"].available
    deny_fail = caps["net"] if not caps["net"].available else caps["loopback"]
    network = {
        "deny": CapabilityStatus("deny", deny_ok, None if deny_ok else deny_fail.reason, deny_fail.detail
                                 if not deny_ok else ""),
        "allow": CapabilityStatus("allow", True),
        "proxy": CapabilityStatus("proxy", False, Reason.NETWORK_MODE_UNSUPPORTED.value, "not built yet"),
    }
    needed = ["user", "mount"]
    if "pid" in policy.namespaces:
        needed.append("pid")
    if any(isinstance(op, Proc) for op in policy.fs):
        needed.append("proc")
    if policy.network.new_namespace:
        needed += ["net", "loopback"]
    missing = [caps[n] for n in needed if not caps[n].available]
    exec_init = init_fd() >= 0
    # Which pid-1 init a launch of this policy runs: "exec" (the freestanding init
    # from a sealed memfd), "fork" (an undumpable copy of the caller: the memfd init
    # cannot be exec'd here, or PYSANDBOX_NATIVE_NO_EXEC_INIT=1), "none" (no pid
    # namespace, or as_pid_1: the command is pid 1 itself).
    init_needed = "pid" in policy.namespaces and not policy.as_pid_1
    init_mode = "none" if not init_needed else ("exec" if exec_init else "fork")
    info = {"has_mount_setattr": has_mount_setattr(), "exec_init": exec_init, "init_mode": init_mode,
            # as_pid_1: the command is pid 1 and may clear its own PR_SET_PDEATHSIG: kill()
            # still ends it, a SIGKILLed launcher does not (README "Lifetime")
            "as_pid_1_lifetime": "command-controlled"}
    if missing:
        first = missing[0]
        return BackendStatus("native", False, first.reason, f"{first.name}: {first.detail}",
                             list(caps.values()), network, info)
    return BackendStatus("native", True, None, "", list(caps.values()), network, info)
