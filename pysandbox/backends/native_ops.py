"""The native executor's op array: the op kinds, flags and stages mirrored from
``native/psb.h``, the :class:`COp` record, and :func:`pack`, which lays a list of ops
out as string-table offsets (:class:`Compiled`). Pure data: no cffi, no host reads.

:mod:`.native_translate` produces the ops from a plan. Adding an op: add ``PSB_OP_X``
to the enum in ``native/psb.h`` and to the cdef in ``native/build_native.py``
(``= ...``), a ``case`` in ``psb_child_main``, ``X`` to :data:`OP_KINDS` here, and emit
``COp("X", ...)`` from the plan op's emitter in :mod:`.native_translate` with its stage
name (and reason, if it has its own). Ops are position-independent records.
"""

from __future__ import annotations

import os

from .. import plan as P
from ..errors import Reason
from ..records import dataclass

CLONE_FLAGS = {"user": 0x10000000, "mount": 0x00020000, "pid": 0x20000000, "net": 0x40000000,
               "ipc": 0x08000000, "uts": 0x04000000, "cgroup": 0x02000000}
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8

# Op kinds and flags, mirrored from native/psb.h. The values are checked against the
# compiled module on load, so a drift is an import-time error, not a bug.
OP_KINDS = ("IDMAP", "PDEATHSIG", "SETUP_ROOT", "MKDIRS", "MKFILE", "BIND", "MOUNT", "SETATTR",
            "SYMLINK", "WRITE", "CHMOD", "PIVOT", "LOOPBACK", "HOSTNAME", "DISABLE_USERNS", "CAPS",
            "NNP", "INIT", "SECCOMP", "SETSID", "CHDIR", "WAIT_FD", "SETNS", "UNSHARE", "HOP",
            "CHECK_PATH", "LANDLOCK", "RLIMIT", "LISTEN", "MOUNT_PRIVATE", "RO_COVER", "BIND_CHECK")
OP = {name: i + 1 for i, name in enumerate(OP_KINDS)}
STAGE_OP, STAGE_CLONE, STAGE_PARENT_DIED, STAGE_FDS, STAGE_EXEC, STAGE_PIPE = 1, 2, 3, 4, 5, 6   # (7, 8: hops, never failures)
STAGE_PTY = 9   # the sandbox's terminal (launch pty_fd)
STAGE_MONITOR = 10   # the launcher's lifetime monitor of an as_pid_1 launch (launch monitor)
F_RO, F_DEV, F_OPTIONAL, F_BIND, F_MODE, F_USERNS_FDS, F_IF_WRITABLE = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
F_CURRENT_IDS, F_LIFELINE, F_NO_AMBIENT, F_NOFOLLOW, F_NO_RAISE = 0x80, 0x100, 0x200, 0x400, 0x800
PROBE_CLONE, PROBE_PROC, PROBE_LOOPBACK, PROBE_IDMAP = 0, 1, 2, 3

DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"))
PROC_RO = P.PROC_READONLY
BWRAP_PROC_RO = ("sys", "sysrq-trigger", "irq", "bus")   # bwrap's own covering, where writable


@dataclass
class COp:
    """One C op. String fields are Python values here; :func:`pack` turns them into
    string-table offsets."""

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


def under_root(root: str, path: str) -> str:
    return root if path == "/" else root + path


def submount_list(mountpoints, src: str, dst: str) -> bytes:
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


def pack(plan: P.Plan, ops: list[COp], *, fallback: bool = False) -> Compiled:
    """Lay ``ops`` out as string-table offsets (pure)."""
    strings = _Strings()
    offsets = []
    for op in ops:
        offsets.append(tuple(strings.add(getattr(op, f)) for f in "abcd"))
    flags = 0
    if plan.first(P.JoinNamespaces) is None:   # else the child unshares after joining
        for name in plan.namespaces:
            flags |= CLONE_FLAGS[name]
    init = any(op.kind == "INIT" for op in ops)
    return Compiled(ops=ops, strtab=bytes(strings.buf) + b"\0", offsets=offsets, clone_flags=flags,
                    no_mount_setattr=fallback, want_status=init)
