"""The plan's operations: frozen records, one per kernel action, in the order a
backend performs them (bubblewrap's ``SetupOp`` list is the same idea in C).

They are pure data named for the kernel action (``BindMount(readonly=True)``, not a
bwrap spelling). :mod:`pysandbox.plan` compiles a Policy into a tuple of them;
:mod:`pysandbox.view` answers what the sandbox will see after a prefix of them.
"""

from __future__ import annotations

import os

from .records import TYPE_CHECKING, dataclass


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


# The host's device nodes a minimal /dev binds, each its own mount (bwrap's --dev).
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")


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
class ProxyListener:
    """Network proxy mode, right after LoopbackUp: the setup listens on 127.0.0.1:port
    (and [::1]:port) inside the new network namespace and hands the listener(s) to the
    launcher, which serves the egress proxy on the host side (pysandbox/egress.py)."""
    port: int


@dataclass(frozen=True)
class SetHostname:
    name: str


@dataclass(frozen=True)
class DisableUserns:
    pass


@dataclass(frozen=True)
class DropCapabilities:
    keep: frozenset = frozenset()   # capability names, lower case without cap_
    ambient: bool = True            # kept ones also inheritable and ambient (Policy.caps_ambient)


@dataclass(frozen=True)
class NoNewPrivs:
    pass


@dataclass(frozen=True)
class Seccomp:
    program: bytes   # classic BPF, 8 bytes an instruction
    notify: bool = False   # loaded with a notification listener, sent to the launcher (denials.py)


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


if not TYPE_CHECKING:   # mypy reads the star import as every public name: the same records
    __all__ = sorted(name for name, value in globals().items()
                     if not name.startswith("_") and getattr(value, "__module__", __name__) == __name__
                     and name not in ("annotations", "TYPE_CHECKING"))
