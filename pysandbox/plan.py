"""Plan: the policy compiled to the ordered setup operations both backends execute.

``compile(policy)`` is pure apart from stat() on the host (bind sources, the type
of a hidden path, whether a mount point exists). It is done once per policy and
reused for every launch. Ops are named for the kernel action; bwrap spellings
live in ``backends/bwrap.py`` and ``bwrap_compat`` only.

Order, as in bubblewrap: namespaces and id maps; the filesystem operations in
policy order (on a fresh tmpfs root, before pivot_root); pivot_root; loopback up;
hostname; nested user namespaces disabled; capabilities dropped; no_new_privs;
seccomp; new session; chdir; exec.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from . import policy as P
from . import seccomp as _seccomp
from .errors import PolicyError, Reason


# ---------------------------------------------------------------- operations

@dataclass(frozen=True)
class Unshare:
    namespaces: frozenset  # subset of user mount pid ipc uts net cgroup


@dataclass(frozen=True)
class IdMap:
    uid: int          # inside
    gid: int
    outer_uid: int    # the caller's ids
    outer_gid: int
    block_fd: int | None = None   # the caller writes the maps: setup waits on this first
    joined: bool = False          # a given user namespace (JoinNamespaces): it has its maps


@dataclass(frozen=True)
class JoinNamespaces:
    """Given namespaces, entered before the new ones are made (inside them)."""
    userns_fd: int | None = None
    pidns_fd: int | None = None


@dataclass(frozen=True)
class EnterUserns2:
    fd: int   # after the pivot, before the privilege drop (bwrap's --userns2)


@dataclass(frozen=True)
class BindMount:
    src: str | None
    dest: str
    readonly: bool = False
    dev: bool = False      # False: nodev on every submount
    optional: bool = False
    src_fd: int | None = None


@dataclass(frozen=True)
class MountTmpfs:
    dest: str
    size: int | None = None
    mode: int | None = None
    readonly: bool = False   # remounted read-only right after (used by Hide)


@dataclass(frozen=True)
class MountOverlay:
    """overlayfs on ``dest``. ``lower``: host directories, bottom first (as given);
    ``upper``/``work``: host directories for writes, or ``tmp``: on the setup tmpfs;
    neither: read-only. ``tmp_index`` numbers the tmp overlays of a plan (bwrap's
    /tmp-overlay-upper-N)."""

    dest: str
    lower: tuple = ()
    upper: str | None = None
    work: str | None = None
    tmp: bool = False
    tmp_index: int = 0

    @property
    def data(self) -> str:
        """The mount options, as bwrap 0.11 builds them (paths in the setup view, under
        /oldroot; the lowers top first; ``\\ , :`` escaped; userxattr: we are always in
        a user namespace, where trusted.* xattrs cannot be set)."""
        if self.upper is not None:
            head = f"upperdir=/oldroot{escape_mount_option(self.upper)},workdir=/oldroot{escape_mount_option(self.work)},"
        elif self.tmp:
            head = f"upperdir=/tmp-overlay-upper-{self.tmp_index},workdir=/tmp-overlay-work-{self.tmp_index},"
        else:
            head = ""
        lowers = ":".join("/oldroot" + escape_mount_option(p) for p in reversed(self.lower))
        return f"{head}lowerdir={lowers},userxattr"


def escape_mount_option(path: str) -> str:
    """A path inside overlayfs mount options: ``\\``, ``,`` and ``:`` escaped by a backslash."""
    return "".join("\\" + ch if ch in "\\,:" else ch for ch in path)


# The kernel copies at most a page of mount data (and wants its NUL in it).
MOUNT_DATA_MAX = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class MountProc:
    dest: str


@dataclass(frozen=True)
class MinimalDev:
    dest: str


@dataclass(frozen=True)
class MountMqueue:
    dest: str


@dataclass(frozen=True)
class MakeDir:
    dest: str
    mode: int | None = None


@dataclass(frozen=True)
class MakeSymlink:
    target: str
    dest: str


@dataclass(frozen=True)
class WriteFile:
    """Create ``dest`` with ``data`` (or what ``fd`` yields). ``bind``: create it on the
    setup tmpfs and bind-mount it on dest (read-only if ``readonly``)."""

    dest: str
    data: bytes | None = None
    fd: int | None = None
    mode: int | None = None
    bind: bool = False
    readonly: bool = False


@dataclass(frozen=True)
class RemountReadonly:
    dest: str


@dataclass(frozen=True)
class ChangeMode:
    dest: str
    mode: int


@dataclass(frozen=True)
class PivotRoot:
    pass


@dataclass(frozen=True)
class LoopbackUp:
    pass


@dataclass(frozen=True)
class SetHostname:
    name: str


@dataclass(frozen=True)
class DisableUserns:
    pass


@dataclass(frozen=True)
class DropCapabilities:
    keep: frozenset = frozenset()   # capability names, lower case without cap_


@dataclass(frozen=True)
class NoNewPrivs:
    pass


@dataclass(frozen=True)
class Seccomp:
    program: bytes   # classic BPF, 8 bytes an instruction


@dataclass(frozen=True)
class NewSession:
    pass


@dataclass(frozen=True)
class PdeathSig:
    pass


@dataclass(frozen=True)
class WaitFd:
    fd: int   # setup done, privileges dropped: wait for a byte or EOF, then close it


@dataclass(frozen=True)
class Chdir:
    path: str


MOUNT_OPS = (BindMount, MountTmpfs, MountOverlay, MountProc, MinimalDev, MountMqueue, MakeDir, MakeSymlink,
             WriteFile, RemountReadonly, ChangeMode)

def shadowed(i: int, ops) -> bool:
    """Whether a mount op after ``ops[i]`` lands on its destination or an ancestor (then
    what ``ops[i]`` mounted is unreachable in the sandbox)."""
    dest = ops[i].dest
    for later in ops[i + 1:]:
        if not isinstance(later, (BindMount, MountTmpfs, MountOverlay, MountProc, MinimalDev, MountMqueue)) \
                and not (isinstance(later, WriteFile) and later.bind):
            continue
        d = later.dest
        if d == dest or d == "/" or dest.startswith(d.rstrip("/") + "/"):
            return True
    return False


# Hidden nodes: empty and inaccessible, read-only.
HIDE_MODE = 0o000

# The host-global entries of a procfs (not per process, not per namespace), covered
# read-only after every /proc mount, whatever the caller's uid, on every backend.
# Sysctl and procfs permission checks look at the uid (kuid 0 may write /proc/sys
# although its directory is 0555), so bwrap's "cover where access(W_OK) succeeds"
# leaves them writable to a root caller. From an audit of a 6.18 kernel (every
# top-level entry that open(O_WRONLY) accepts for a root caller: sys, pressure) and
# Docker/runc's masked and read-only paths for what other kernels and drivers add.
# Entries this kernel lacks are skipped (ENOENT).
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "driver", "acpi", "scsi", "asound",
                 "mtrr", "tty", "sysvipc", "pressure", "dynamic_debug", "latency_stats",
                 "timer_list", "timer_stats", "sched_debug")


@dataclass(frozen=True)
class Plan:
    """The compiled policy. ``ops`` is the whole ordered list; the attributes are
    derived views that backends and probes use."""

    policy: P.Policy
    ops: tuple

    @property
    def namespaces(self) -> frozenset:
        return next(op.namespaces for op in self.ops if isinstance(op, Unshare))

    @property
    def mount_ops(self) -> tuple:
        return tuple(op for op in self.ops if isinstance(op, MOUNT_OPS))

    @property
    def idmap(self) -> IdMap:
        return next(op for op in self.ops if isinstance(op, IdMap))

    def first(self, kind):
        return next((op for op in self.ops if isinstance(op, kind)), None)


# ---------------------------------------------------------------- compile

def compile(policy: P.Policy, *, allow_host_mountpoints: bool = False,
            outer_ids: tuple[int, int] | None = None) -> Plan:
    """Compile ``policy`` into a :class:`Plan`.

    ``allow_host_mountpoints`` lets a mount point be created inside a writable host
    bind (bubblewrap does this; pybwrap follows it). pysandbox's own policies never
    create files on the host: a missing mount point there is a PolicyError.

    Raises:
        PolicyError: a missing bind or overlay source (``bind_source_missing``), overlay
            mount options longer than a page (``invalid_value``), a mount point
            that does not exist inside a host bind (``mount_point_missing``), a chdir
            outside anything mounted.
        CapabilityUnavailable: ``seccomp_unavailable``, no built-in filter for this
            architecture (seccomp.py).
    """
    if not isinstance(policy, P.Policy):
        raise PolicyError("compile needs a Policy", Reason.INVALID_VALUE, policy)
    outer_uid, outer_gid = outer_ids if outer_ids is not None else (os.geteuid(), os.getegid())
    ns = set(policy.namespaces) | {"mount"}
    if policy.network.new_namespace:
        ns.add("net")
    ops: list = [Unshare(frozenset(ns))]
    if policy.userns_fd is not None or policy.pidns_fd is not None:
        ops.append(JoinNamespaces(policy.userns_fd, policy.pidns_fd))
    ops.append(IdMap(outer_uid if policy.uid is None else policy.uid,
                     outer_gid if policy.gid is None else policy.gid, outer_uid, outer_gid,
                     policy.userns_block_fd, joined=policy.userns_fd is not None))
    if policy.die_with_parent:
        ops.append(PdeathSig())
    done: list = []   # the mount ops so far, for resolving sandbox paths to host paths
    for op in policy.fs:
        for planned in _compile_fs(op, done, allow_host_mountpoints):
            done.append(planned)
            ops.append(planned)
    ops.append(PivotRoot())
    if "net" in ns:
        ops.append(LoopbackUp())
    if policy.hostname is not None:
        ops.append(SetHostname(policy.hostname))
    if policy.userns2_fd is not None:   # as bwrap: after everything that needs the first one's rights
        ops.append(EnterUserns2(policy.userns2_fd))
    if not policy.allow_nested_userns:
        ops.append(DisableUserns())
    ops.append(DropCapabilities(policy.caps_keep))
    ops.append(NoNewPrivs())
    if policy.block_fd is not None:   # as bwrap: after the capability drop, before seccomp
        ops.append(WaitFd(policy.block_fd))
    ops.extend(Seccomp(prog) for prog in policy.seccomp)
    # Built-in filters, always (seccomp.py): TIOCSTI/TIOCLINUX refused even with a shared
    # session, the keyring calls, io_uring unless allowed, and in deny/proxy mode the
    # socket families no network namespace confines (AF_VSOCK ...).
    ops.extend(Seccomp(prog) for prog in _seccomp.builtin_filters(
        strict_unix=policy.strict_unix, network=policy.network.mode, allow_io_uring=policy.allow_io_uring))
    if policy.new_session:
        ops.append(NewSession())
    ops.append(Chdir(policy.chdir or "/"))
    return Plan(policy=policy, ops=tuple(ops))


def host_path(sandbox_path: str, done) -> tuple[str | None, object | None]:
    """Where ``sandbox_path`` lives, given the mount ops applied so far.

    Returns ``(host_path, op)``: the host path behind it when the innermost covering
    mount is a host bind (else None), and that covering op (None: the setup tmpfs root).
    """
    for op in reversed(done):
        if isinstance(op, (BindMount, MountTmpfs, MountOverlay, MountProc, MinimalDev, MountMqueue)) or \
                (isinstance(op, WriteFile) and op.bind):
            dest = op.dest
            if sandbox_path == dest or dest == "/" or sandbox_path.startswith(dest + "/"):
                rest = sandbox_path[len(dest):] if dest != "/" else sandbox_path
                if isinstance(op, BindMount) and op.src is not None:
                    src = op.src.rstrip("/") or ""
                    return (src + rest) if (src + rest) else "/", op
                if isinstance(op, MountOverlay):
                    # What the overlay shows there: the topmost layer that has it (stat only).
                    layers = ((op.upper,) if op.upper is not None else ()) + tuple(reversed(op.lower))
                    for layer in layers:
                        cand = (layer.rstrip("/") + rest) or "/"
                        if os.path.lexists(cand):
                            return cand, op
                return None, op
    return None, None


def _compile_fs(op, done, allow_host_mountpoints):
    if isinstance(op, P.Hide):
        yield from _compile_hide(op, done)
        return
    if isinstance(op, P.Bind):
        P.check_bind_source(op)
        if op.src is not None and op.optional and not os.path.lexists(op.src):
            return  # bwrap --bind-try: a missing source is skipped
        planned = BindMount(op.src, op.dest, op.readonly, op.dev, op.optional, op.src_fd)
        is_dir = op.src_fd is not None or os.path.isdir(op.src)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=is_dir)
    elif isinstance(op, P.Tmpfs):
        planned = MountTmpfs(op.dest, op.size, op.mode)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Proc):
        planned = MountProc(op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Dev):
        planned = MinimalDev(op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Mqueue):
        planned = MountMqueue(op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Dir):
        planned = MakeDir(op.dest, op.mode)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.Symlink):
        planned = MakeSymlink(op.target, op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=None)
    elif isinstance(op, P.File):
        planned = WriteFile(op.dest, op.data, op.fd, op.mode, op.bind, op.readonly)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=False)
    elif isinstance(op, P.Overlay):
        P.check_overlay_sources(op)
        index = sum(1 for d in done if isinstance(d, MountOverlay) and d.tmp) if op.tmp else 0
        planned = MountOverlay(op.dest, op.lower, op.upper, op.work, op.tmp, index)
        if len(planned.data.encode()) >= MOUNT_DATA_MAX:
            raise PolicyError(f"the overlay on {op.dest} has mount options longer than a page "
                              f"({len(planned.data.encode())} bytes): use fewer or shorter lower directories",
                              Reason.INVALID_VALUE, op.dest)
        _check_mountpoint(op.dest, done, allow_host_mountpoints, want_dir=True)
    elif isinstance(op, P.RemountRo):
        planned = RemountReadonly(op.dest)
    elif isinstance(op, P.Chmod):
        planned = ChangeMode(op.dest, op.mode)
    else:  # pragma: no cover - Policy validates op types
        raise PolicyError(f"unknown filesystem operation {op!r}", Reason.INVALID_VALUE, op)
    yield planned


def _check_mountpoint(dest, done, allow_host_mountpoints, want_dir):
    """A destination inside a host bind must already exist there: creating it would
    leave a file or directory on the host (rw bind) or fail with EROFS (ro bind)."""
    host, cover = host_path(dest, done)
    if host is None and isinstance(cover, MountOverlay) and not cover.tmp:
        # Missing in every layer: made in the upper directory on the host (or EROFS).
        if allow_host_mountpoints and cover.upper is not None:
            return
        where = "writable" if cover.upper is not None else "read-only"
        raise PolicyError(
            f"{dest} does not exist in any layer of the {where} overlay on {cover.dest}; pysandbox never "
            f"creates mount points on the host: create it first, or put a tmpfs or dir above it",
            Reason.MOUNT_POINT_MISSING, dest)
    if host is None or os.path.lexists(host):
        return
    # Its parent may itself be created by an earlier op that covers the host path
    # (e.g. a Dir inside a tmpfs): host is None in that case and we returned above.
    if allow_host_mountpoints and isinstance(cover, BindMount) and not cover.readonly:
        return
    kind = "directory" if want_dir else "file"
    where = "read-only" if isinstance(cover, BindMount) and cover.readonly else "writable"
    raise PolicyError(
        f"{dest} does not exist inside the {where} host bind of {cover.src}; pysandbox never creates "
        f"mount points on the host: create the {kind} first, or put a tmpfs or dir above it",
        Reason.MOUNT_POINT_MISSING, dest)


def _compile_hide(op: P.Hide, done):
    host, cover = host_path(op.path, done)
    if host is None:
        # Not backed by the host: nothing of the host's to hide, unless an earlier op
        # created it in the sandbox. Cover it only if it is a mount point we made.
        if cover is not None and getattr(cover, "dest", None) == op.path:
            yield MountTmpfs(op.path, size=None, mode=HIDE_MODE, readonly=True)
        return
    try:
        st = os.stat(host)
    except OSError:
        return  # nothing there: already hidden
    if stat.S_ISDIR(st.st_mode):
        yield MountTmpfs(op.path, size=None, mode=HIDE_MODE, readonly=True)
    else:
        yield WriteFile(op.path, data=b"", mode=HIDE_MODE, bind=True, readonly=True)
