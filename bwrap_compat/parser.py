"""bubblewrap 0.11's command line, parsed as bwrap parses it (``parse_args_recurse``).

The result is a :class:`BwrapArgs`: the options, in order where order matters
(filesystem operations, environment and capability edits). Nothing here touches
the kernel except reading the descriptors bwrap itself reads while parsing
(``--args FD``, ``--add-seccomp-fd FD``), through the ``read_fd`` callable.

Errors carry bwrap's own message (without the ``bwrap: `` prefix) in a
:class:`~pysandbox.errors.BwrapArgumentError`; ``.usage`` is set when bwrap would
print its usage text instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pysandbox.errors import BwrapArgumentError, Reason
from pysandbox.policy import CAPABILITIES

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


def _die(message: str, usage: bool = False, level_prefix: bool = False) -> BwrapArgumentError:
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


class _Parser:
    def __init__(self, read_fd, close_fd):
        self.a = BwrapArgs()
        self.read_fd = read_fd
        self.close_fd = close_fd
        self.next_perms = -1
        self.next_size = 0
        self.overlay_srcs: list[str] = []
        self.total = 0

    def die(self, message, usage=False):
        return _die(message, usage, self.a.level_prefix)

    def warn_last(self, name):
        self.a.warnings.append(f"Only the last {name} option will take effect")

    def fd_arg(self, text):
        fd = parse_int_arg(text)
        if fd is None:
            raise self.die(f"Invalid fd: {text}")
        return fd

    def load(self, fd, what):
        try:
            data = self.read_fd(fd)
        except OSError as exc:
            raise self.die(f"Can't read {what}: {os.strerror(exc.errno or 0)}") from None
        return data

    def perms_for(self, kind):
        perms = self.next_perms if self.next_perms >= 0 else PERMS_DEFAULT[kind]
        self.next_perms = -1
        return perms

    def overlay_take(self):
        srcs = tuple(self.overlay_srcs)
        self.overlay_srcs = []
        return srcs

    # The loop of parse_args_recurse: returns the index of the first unparsed word.
    def run(self, argv, in_file):
        a = self.a
        if self.total > MAX_ARGS:
            raise self.die(f"Exceeded maximum number of arguments {MAX_ARGS}")
        i, n = 0, len(argv)
        while i < n:
            arg = argv[i]
            left = n - i   # bwrap's argc

            def need(count, message):
                if left < count + 1:
                    raise self.die(message)

            if arg == "--help":
                a.action = "help"
                return None
            elif arg == "--version":
                a.action = "version"
                return None
            elif arg == "--args":
                if in_file:
                    raise self.die("--args not supported in arguments file")
                need(1, "--args takes an argument")
                fd = self.fd_arg(argv[i + 1])
                data = self.load(fd, "--args data")
                self.close_fd(fd)
                words = data.split(b"\0")
                if words and words[-1] == b"":
                    words.pop()
                for _ in words:
                    self.total += 1
                    if self.total > MAX_ARGS:
                        raise self.die(f"Exceeded maximum number of arguments {MAX_ARGS}")
                inner = [w.decode("utf-8", "surrogateescape") for w in words]
                if self.run(inner, True) is None:
                    return None
                i += 1
            elif arg == "--argv0":
                need(1, "--argv0 takes one argument")
                if a.argv0 is not None:
                    raise self.die("--argv0 used multiple times")
                a.argv0 = argv[i + 1]
                i += 1
            elif arg == "--level-prefix":
                a.level_prefix = True
            elif arg == "--unshare-all":
                a.unshare_user_try = a.unshare_ipc = a.unshare_pid = True
                a.unshare_uts = a.unshare_cgroup_try = a.unshare_net = True
            elif arg.startswith("--unshare-") and arg[10:].replace("-", "_") in (
                    "user", "user_try", "ipc", "pid", "net", "uts", "cgroup", "cgroup_try"):
                setattr(a, arg[2:].replace("-", "_"), True)
            elif arg == "--share-net":
                a.unshare_net = False
            elif arg == "--chdir":
                need(1, "--chdir takes one argument")
                if a.chdir is not None:
                    self.warn_last("--chdir")
                a.chdir = argv[i + 1]
                i += 1
            elif arg == "--disable-userns":
                a.disable_userns = True
            elif arg == "--assert-userns-disabled":
                a.assert_userns_disabled = True
            elif arg == "--remount-ro":
                need(1, "--remount-ro takes one argument")
                a.ops.append(FsOp("--remount-ro", argv[i + 1]))
                i += 1
            elif arg in ("--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try"):
                need(2, f"{arg} takes two arguments")
                a.ops.append(FsOp(arg, argv[i + 2], src=argv[i + 1]))
                i += 2
            elif arg in ("--bind-fd", "--ro-bind-fd"):
                need(2, "--bind-fd takes two arguments")
                fd = self.fd_arg(argv[i + 1])
                a.ops.append(FsOp(arg, argv[i + 2], src=f"/proc/self/fd/{fd}", fd=fd))
                a.consumed_fds.append(fd)
                i += 2
            elif arg == "--overlay-src":
                # bwrap does not check that a source follows; a missing one is caught below.
                if i + 1 < n:
                    self.overlay_srcs.append(argv[i + 1])
                else:
                    self.overlay_srcs.append("")
                i += 1
            elif arg == "--overlay":
                need(3, "--overlay takes three arguments")
                if len(self.overlay_srcs) < 1:
                    raise self.die("--overlay requires at least one --overlay-src")
                a.ops.append(FsOp("--overlay", argv[i + 3], src=argv[i + 1], workdir=argv[i + 2],
                                  overlay_srcs=self.overlay_take()))
                i += 3
            elif arg in ("--tmp-overlay", "--ro-overlay"):
                need(1, f"{arg} takes an argument")
                least = 1 if arg == "--tmp-overlay" else 2
                if len(self.overlay_srcs) < least:
                    raise self.die(f"{arg} requires at least {'one' if least == 1 else 'two'} --overlay-src")
                a.ops.append(FsOp(arg, argv[i + 1], overlay_srcs=self.overlay_take()))
                i += 1
            elif arg in ("--proc", "--dev", "--mqueue", "--dir"):
                need(1, f"{arg} takes an argument")
                perms = self.perms_for(arg) if arg == "--dir" else None
                a.ops.append(FsOp(arg, argv[i + 1], perms=perms))
                i += 1
            elif arg in ("--exec-label", "--file-label"):
                need(1, f"{arg} takes an argument")
                attr = arg[2:].replace("-", "_")
                if getattr(a, attr) is not None:
                    self.warn_last(arg)
                setattr(a, attr, argv[i + 1])
                _die_unless_label_valid(self)
                i += 1
            elif arg == "--tmpfs":
                need(1, "--tmpfs takes an argument")
                perms = self.perms_for(arg)
                size = self.next_size or None
                self.next_size = 0
                a.ops.append(FsOp(arg, argv[i + 1], perms=perms, size=size))
                i += 1
            elif arg in ("--file", "--bind-data", "--ro-bind-data"):
                need(2, f"{arg} takes two arguments")
                fd = self.fd_arg(argv[i + 1])
                a.ops.append(FsOp(arg, argv[i + 2], fd=fd, perms=self.perms_for(arg)))
                a.consumed_fds.append(fd)
                i += 2
            elif arg == "--symlink":
                need(2, "--symlink takes two arguments")
                a.ops.append(FsOp(arg, argv[i + 2], src=argv[i + 1]))
                i += 2
            elif arg == "--lock-file":
                need(1, "--lock-file takes an argument")
                a.lock_files.append(argv[i + 1])
                i += 1
            elif arg in ("--sync-fd", "--block-fd", "--userns-block-fd", "--info-fd", "--json-status-fd",
                         "--userns", "--userns2", "--pidns"):
                need(1, f"{arg} takes an argument")
                attr = arg[2:].replace("-", "_")
                if not attr.endswith("_fd"):
                    attr += "_fd"
                if getattr(a, attr) is not None:
                    self.warn_last(arg)
                setattr(a, attr, self.fd_arg(argv[i + 1]))
                i += 1
            elif arg == "--seccomp":
                need(1, "--seccomp takes an argument")
                if a.seccomp_programs:
                    raise self.die("--seccomp cannot be combined with --add-seccomp-fd")
                if a.seccomp_fd is not None:
                    self.warn_last("--seccomp")
                a.seccomp_fd = self.fd_arg(argv[i + 1])
                i += 1
            elif arg == "--add-seccomp-fd":
                need(1, "--add-seccomp-fd takes an argument")
                if a.seccomp_fd is not None:
                    raise self.die("--add-seccomp-fd cannot be combined with --seccomp")
                fd = self.fd_arg(argv[i + 1])
                a.seccomp_programs.append(_seccomp_data(self, fd))
                i += 1
            elif arg == "--clearenv":
                a.env_ops.append(("clear",))
            elif arg == "--setenv":
                need(2, "--setenv takes two arguments")
                a.env_ops.append(("set", argv[i + 1], argv[i + 2]))
                i += 2
            elif arg == "--unsetenv":
                need(1, "--unsetenv takes an argument")
                a.env_ops.append(("unset", argv[i + 1]))
                i += 1
            elif arg in ("--uid", "--gid"):
                need(1, f"{arg} takes an argument")
                attr = arg[2:]
                if getattr(a, attr) is not None:
                    self.warn_last(arg)
                value = parse_int_arg(argv[i + 1])
                if value is None:
                    raise self.die(f"Invalid {attr}: {argv[i + 1]}")
                setattr(a, attr, value)
                i += 1
            elif arg == "--hostname":
                need(1, "--hostname takes an argument")
                if a.hostname is not None:
                    self.warn_last("--hostname")
                a.hostname = argv[i + 1]
                i += 1
            elif arg in ("--new-session", "--die-with-parent", "--as-pid-1"):
                setattr(a, arg[2:].replace("-", "_"), True)
            elif arg in ("--cap-add", "--cap-drop"):
                need(1, f"{arg} takes an argument")
                name = argv[i + 1]
                if name.lower() == "all":
                    caps = ALL_CAPS
                else:
                    cap = cap_from_name(name)
                    if cap is None:
                        raise self.die(f"unknown cap: {name}")
                    caps = frozenset({cap})
                a.cap_ops.append((arg[6:], caps))
                i += 1
            elif arg in ("--perms", "--chmod"):
                need(1 if arg == "--perms" else 2, f"{arg} takes {'an argument' if arg == '--perms' else 'two arguments'}")
                if arg == "--perms" and self.next_perms != -1:
                    raise self.die("--perms given twice for the same action")
                text = argv[i + 1]
                perms, rest, _ = c_strtol(text, 8, unsigned=True)
                if text == "" or rest != "" or perms > 0o7777:
                    raise self.die(f"{arg} takes an octal argument <= 07777")
                if arg == "--perms":
                    self.next_perms = perms
                    i += 1
                else:
                    a.ops.append(FsOp("--chmod", argv[i + 2], perms=perms))
                    i += 2
            elif arg == "--size":
                need(1, "--size takes an argument")
                if self.next_size != 0:
                    raise self.die("--size given twice for the same action")
                text = argv[i + 1]
                size, rest, over = c_strtol(text, 0, unsigned=True)
                if over or not text[:1].isdigit() or not text[:1].isascii() or rest != "" or size == 0:
                    raise self.die("--size takes a non-zero number of bytes")
                if size > MAX_TMPFS_BYTES:
                    raise self.die(f"--size (for tmpfs) is limited to {MAX_TMPFS_BYTES}")
                self.next_size = size
                i += 1
            elif arg == "--":
                return i + 1
            elif arg.startswith("-"):
                raise self.die(f"Unknown option {arg}")
            else:
                return i
            if arg not in ("--perms", "--size") and self.next_perms >= 0:
                raise self.die("--perms must be followed by an option that creates a file")
            if arg not in ("--perms", "--size") and self.next_size != 0:
                raise self.die("--size must be followed by --tmpfs")
            if arg != "--overlay-src" and self.overlay_srcs:
                raise self.die(OVERLAY_SRC_ORPHAN)
            i += 1
        return n


def _seccomp_data(parser: _Parser, fd: int) -> bytes:
    data = parser.load(fd, "seccomp data")
    parser.close_fd(fd)
    if len(data) % 8:
        raise parser.die("Invalid seccomp data, must be multiple of 8")
    return data


def selinux_enabled() -> bool:
    return os.path.exists("/sys/fs/selinux/enforce")


def _die_unless_label_valid(parser: _Parser) -> None:
    if not selinux_enabled():
        raise parser.die("labeling not supported on this system")
    raise parser.die("SELinux labels are not supported by pybwrap (needs native support)")


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def parse(argv, *, read_fd=read_fd_default, close_fd=_close_quietly) -> BwrapArgs:
    """Parse bwrap's arguments (``argv`` without the program name), as bwrap 0.11 does.

    ``--args`` and ``--add-seccomp-fd`` descriptors are read (``read_fd``) and closed
    (``close_fd``) while parsing, as bwrap does; every other descriptor is only recorded.
    The checks bwrap makes in ``main`` after parsing are :func:`check`'s.

    Raises:
        BwrapArgumentError: bwrap would exit 1 with this message (``.usage``: with usage text).
    """
    argv = [os.fsdecode(x) if isinstance(x, (bytes, os.PathLike)) else x for x in argv]
    if any(not isinstance(x, str) for x in argv):
        raise _die("arguments must be strings")
    if len(argv) == 1 and argv[0] == "--version":
        return BwrapArgs(action="version")
    if not argv:
        raise _die("no command given", usage=True)
    parser = _Parser(read_fd, close_fd)
    parser.total = len(argv)
    try:
        rest = parser.run(argv, False)
        if rest is not None and parser.overlay_srcs:
            raise parser.die(OVERLAY_SRC_ORPHAN)
    except BwrapArgumentError as exc:
        exc.warnings = list(parser.a.warnings)   # printed before the error, as bwrap does
        raise
    args = parser.a
    if rest is not None:
        args.command = argv[rest:]
    return args


def userns_try_available() -> bool:
    """bwrap's --unshare-user-try probe (files only, nothing is created)."""
    if not os.path.exists("/proc/self/ns/user"):
        return False
    for path, off in (("/sys/module/user_namespace/parameters/enable", "N"),
                      ("/proc/sys/user/max_user_namespaces", "0\n")):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if (off == "N" and text.startswith("N")) or text == off:
            return False
    return True


def check(args: BwrapArgs, real_uid: int | None = None, real_gid: int | None = None,
          userns_try: bool | None = None) -> BwrapArgs:
    """The checks of bwrap's ``main`` after parsing, in bwrap's order; fills in the user
    namespace bwrap implies (always for non-root) and the default uid/gid.

    Raises:
        BwrapArgumentError: bwrap would exit 1 with this message (``.usage``: usage text).
    """
    real_uid = os.getuid() if real_uid is None else real_uid
    real_gid = os.getgid() if real_gid is None else real_gid

    def die(message, usage=False):
        return _die(message, usage, args.level_prefix)

    if args.userns_block_fd is not None and not args.unshare_user:
        raise die("--userns-block-fd requires --unshare-user")
    if args.userns_block_fd is not None and args.info_fd is None:
        raise die("--userns-block-fd requires --info-fd")
    if args.userns_fd is not None and args.unshare_user:
        raise die("--userns not compatible --unshare-user")
    if args.userns_fd is not None and args.unshare_user_try:
        raise die("--userns not compatible --unshare-user-try")
    if args.disable_userns and not args.unshare_user:
        raise die("--disable-userns requires --unshare-user")
    if args.disable_userns and args.userns_block_fd is not None:
        raise die("--disable-userns is not compatible with  --userns-block-fd")
    if real_uid != 0 and args.userns_fd is None:
        args.unshare_user = True
    if args.unshare_user_try:
        if userns_try is None:
            userns_try = userns_try_available()
        if userns_try:
            args.unshare_user = True
    if not args.command:
        raise die("no command given", usage=True)
    if args.uid is None:
        args.uid = real_uid
    if args.gid is None:
        args.gid = real_gid
    if not args.unshare_user and args.userns_fd is None and args.uid != real_uid:
        raise die("Specifying --uid requires --unshare-user or --userns")
    if not args.unshare_user and args.userns_fd is None and args.gid != real_gid:
        raise die("Specifying --gid requires --unshare-user or --userns")
    if not args.unshare_uts and args.hostname is not None:
        raise die("Specifying --hostname requires --unshare-uts")
    if args.as_pid_1 and not args.unshare_pid:
        raise die("Specifying --as-pid-1 requires --unshare-pid")
    if args.as_pid_1 and args.lock_files:
        raise die("Specifying --as-pid-1 and --lock-file is not permitted")
    return args
