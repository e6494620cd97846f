"""What bwrap's command line holds once parsed: :class:`BwrapArgs` (the options, in
order where order matters) and :class:`FsOp`, the limits and defaults bwrap applies,
and its number parsing (``strtol`` as C does it, capability names)."""

from __future__ import annotations

import os

from pysandbox.errors import BwrapArgumentError, Reason
from pysandbox.policy import CAPABILITIES
from pysandbox.records import dataclass, field

MAX_ARGS = 9000
MAX_TMPFS_BYTES = (2**64 - 1) >> 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
ULONG_MAX = 2**64 - 1
OVERLAY_SRC_ORPHAN = ("--overlay-src must be followed by another --overlay-src or one of --overlay, "
                      "--tmp-overlay, or --ro-overlay")
# libcap's names (capability(7)), index = capability number: the Policy's own list.
CAP_NAMES = CAPABILITIES
ALL_CAPS = frozenset(range(64))

# Which modifier each filesystem option consumes; default mode when --perms is absent.
PERMS_DEFAULT = {"--tmpfs": 0o755, "--dir": 0o755, "--file": 0o666, "--bind-data": 0o600,
                 "--ro-bind-data": 0o600}


@dataclass(frozen=True)
class FsOp:
    """One bwrap filesystem operation, in command-line order.

    ``kind`` is the bwrap option (``--bind``, ``--tmpfs``, ``--overlay`` ...);
    ``src`` a host path (binds, overlay upper dir), a symlink target, or None; ``fd`` a
    descriptor (--file, --bind-data, --bind-fd); ``perms``/``size`` the values of a
    preceding --perms/--size (or bwrap's default mode); ``overlay_srcs`` the lower dirs
    of an overlay, bottom first as given; ``workdir`` the --overlay work dir."""

    kind: str
    dest: str
    src: str | None = None
    fd: int | None = None
    perms: int | None = None
    size: int | None = None
    overlay_srcs: tuple[str, ...] = ()
    workdir: str | None = None


@dataclass
class BwrapArgs:
    """Everything a bwrap command line says. ``action`` is ``run``, ``help`` or ``version``."""

    action: str = "run"
    command: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    env_ops: list = field(default_factory=list)   # ("set", k, v) | ("unset", k) | ("clear",)
    cap_ops: list = field(default_factory=list)   # ("add"|"drop", frozenset of numbers)
    seccomp_fd: int | None = None
    seccomp_programs: list = field(default_factory=list)   # bytes, from --add-seccomp-fd
    unshare_user: bool = False
    unshare_user_try: bool = False
    unshare_ipc: bool = False
    unshare_pid: bool = False
    unshare_net: bool = False
    unshare_uts: bool = False
    unshare_cgroup: bool = False
    unshare_cgroup_try: bool = False
    disable_userns: bool = False
    assert_userns_disabled: bool = False
    uid: int | None = None
    gid: int | None = None
    hostname: str | None = None
    chdir: str | None = None
    argv0: str | None = None
    level_prefix: bool = False
    new_session: bool = False
    not_a_security_boundary: bool = False   # accepted (bwrap 0.12); pybwrap stays strict
    die_with_parent: bool = False
    as_pid_1: bool = False
    exec_label: str | None = None
    file_label: str | None = None
    sync_fd: int | None = None
    block_fd: int | None = None
    userns_block_fd: int | None = None
    info_fd: int | None = None
    json_status_fd: int | None = None
    userns_fd: int | None = None
    userns2_fd: int | None = None
    pidns_fd: int | None = None
    lock_files: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    consumed_fds: list = field(default_factory=list)   # descriptors bwrap closes before exec

    @property
    def cap_add_or_drop_used(self) -> bool:
        return bool(self.cap_ops)


def usage_error(message: str, usage: bool = False, level_prefix: bool = False) -> BwrapArgumentError:
    err = BwrapArgumentError(message, Reason.BWRAP_ARGUMENT_INVALID, message)
    err.usage = usage
    err.level_prefix = level_prefix
    return err


def c_strtol(text: str, base: int, unsigned: bool = False) -> tuple[int, str, bool]:
    """C strtol/strtoul/strtoull: (value, unparsed rest, overflowed). Leading blanks and a
    sign are accepted; with no digits the whole string is the rest."""
    s = text.lstrip(" \t\n\v\f\r")
    i, neg = 0, False
    if s[:1] in ("+", "-"):
        neg, i = s[0] == "-", 1
    if base == 0:
        if s[i:i + 2].lower() == "0x" and s[i + 2:i + 3] and s[i + 2].lower() in "0123456789abcdef":
            base, i = 16, i + 2
        elif s[i:i + 1] == "0":
            base = 8
        else:
            base = 10
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[:base]
    j = i
    while j < len(s) and s[j].lower() in digits:
        j += 1
    if j == i:
        return 0, text, False
    value = int(s[i:j], base)
    over = False
    if unsigned:
        if value > ULONG_MAX:
            value, over = ULONG_MAX, True
        elif neg:
            value = (-value) & ULONG_MAX
    else:
        value = -value if neg else value
        if value > LONG_MAX:
            value, over = LONG_MAX, True
        elif value < LONG_MIN:
            value, over = LONG_MIN, True
    return value, s[j:], over


def _as_c_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def parse_int_arg(text: str) -> int | None:
    """bwrap's ``strtol`` check for descriptors and ids: None when bwrap says Invalid."""
    value, rest, _ = c_strtol(text, 10)
    value = _as_c_int(value)
    if text == "" or rest != "" or value < 0:
        return None
    return value


def cap_from_name(name: str) -> int | None:
    """libcap's cap_from_name: ``cap_xxx`` in any case, or a number below 64."""
    lower = name.lower()
    if lower.startswith("cap_") and lower[4:] in CAP_NAMES:
        return CAP_NAMES.index(lower[4:])
    if name.isdigit() and int(name) < 64:
        return int(name)
    return None


def read_fd_default(fd: int) -> bytes:
    """Read ``fd`` to EOF and close it, as bwrap's load_file_data (Raises OSError)."""
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)
