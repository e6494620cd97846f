"""The policy: frozen, validated, pure data. No syscalls except stat() of bind sources.

A Policy is what the caller wants; ``plan.compile`` turns it into the ordered setup
operations both backends execute. Every user mistake raises :class:`PolicyError`
with a reason and the offending value, never another exception.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

from .errors import PolicyError, Reason

NAMESPACES = ("user", "pid", "ipc", "uts", "net", "cgroup")
NETWORK_MODES = ("deny", "allow", "proxy")
IMPLEMENTED_NETWORK_MODES = ("deny", "allow")
_ENV_NAME = re.compile(r"^[^=\x00]+$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,62})$")
# Linux capability names (capability(7)), without the CAP_ prefix, lower case.
CAPABILITIES = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid",
    "setuid", "setpcap", "linux_immutable", "net_bind_service", "net_broadcast",
    "net_admin", "net_raw", "ipc_lock", "ipc_owner", "sys_module", "sys_rawio",
    "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
    "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write",
    "audit_control", "setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm",
    "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
)


# ---------------------------------------------------------------- validation helpers

def check_path(path, what: str = "path") -> str:
    """An absolute, NUL-free path, normalised (no '.', '..' or repeated '/')."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        try:
            path = path.decode()
        except UnicodeDecodeError:
            raise PolicyError(f"{what} is not valid UTF-8: {path!r}", Reason.INVALID_PATH, path) from None
    if not isinstance(path, str):
        raise PolicyError(f"{what} must be a string, not {type(path).__name__}", Reason.INVALID_PATH, path)
    if not path or "\x00" in path:
        raise PolicyError(f"{what} is empty or contains NUL: {path!r}", Reason.INVALID_PATH, path)
    if not path.startswith("/"):
        raise PolicyError(f"{what} must be absolute: {path!r}", Reason.INVALID_PATH, path)
    if len(path.encode(errors="surrogateescape")) >= 4096:
        raise PolicyError(f"{what} is longer than PATH_MAX: {path[:40]!r}...", Reason.INVALID_PATH, path)
    try:
        path.encode()
    except UnicodeEncodeError:
        raise PolicyError(f"{what} is not valid UTF-8: {path!r}", Reason.INVALID_PATH, path) from None
    parts = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise PolicyError(f"{what} must not contain '..': {path!r}", Reason.INVALID_PATH, path)
        if len(part.encode()) > 255:
            raise PolicyError(f"{what} has a component longer than NAME_MAX: {path[:40]!r}...",
                              Reason.INVALID_PATH, path)
        parts.append(part)
    return "/" + "/".join(parts)


def canonical(path: str) -> str:
    """``path`` (absolute, checked) with every symlink in it resolved as the host has it
    now (os.path.realpath; a missing tail is kept as given). Host paths of a policy are
    kept in this form: the native backend resolves them at launch without following
    any symlink, so a symlink swapped in later makes the launch fail closed
    (``symlink_in_path``) instead of binding what it points to."""
    return os.path.realpath(path)


def check_mode(mode, what: str = "mode") -> int | None:
    if mode is None:
        return None
    if isinstance(mode, str):
        try:
            mode = int(mode, 8)
        except ValueError:
            raise PolicyError(f"{what} is not an octal number: {mode!r}", Reason.INVALID_MODE, mode) from None
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise PolicyError(f"{what} must be an integer in 0..0o7777: {mode!r}", Reason.INVALID_MODE, mode)
    return mode


def check_size(size) -> int | None:
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size < 2**63:
        raise PolicyError(f"size must be a positive integer of bytes: {size!r}", Reason.INVALID_SIZE, size)
    return size


def check_fd(fd, what: str = "descriptor") -> int:
    if isinstance(fd, bool) or not isinstance(fd, int) or not 0 <= fd < 2**31:
        raise PolicyError(f"{what} must be a non-negative integer: {fd!r}", Reason.INVALID_VALUE, fd)
    return fd


def check_id(value, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 1:
        raise PolicyError(f"{what} must be an integer in 0..2**32-2: {value!r}", Reason.INVALID_VALUE, value)
    return value


def _set(obj, name, value):
    object.__setattr__(obj, name, value)


def _validated(cls):
    """Any malformed input to a policy dataclass becomes a PolicyError, never a TypeError
    or another builtin exception leaking from the validation code."""
    check = cls.__post_init__

    def __post_init__(self):
        try:
            check(self)
        except PolicyError:
            raise
        except (TypeError, ValueError, AttributeError, OverflowError, KeyError) as exc:
            raise PolicyError(f"invalid {cls.__name__}: {exc}", Reason.INVALID_VALUE, None) from exc

    cls.__post_init__ = __post_init__
    return cls


def _items(value, what: str) -> tuple:
    """``tuple(value)``, with a PolicyError instead of a TypeError for a non-collection."""
    try:
        return tuple(value)
    except TypeError:
        raise PolicyError(f"{what} must be a collection, not {type(value).__name__}",
                          Reason.INVALID_VALUE, value) from None


def _hashable(item, what: str) -> bool:
    try:
        hash(item)
    except TypeError:
        raise PolicyError(f"{what} entries must be names: {item!r}", Reason.INVALID_VALUE, item) from None
    return True


# ---------------------------------------------------------------- filesystem operations

@_validated
@dataclass(frozen=True)
class Bind:
    """Bind the host path ``src`` on ``dest``. ``readonly`` applies to every submount;
    ``dev`` keeps device nodes usable; ``optional`` skips a missing source (bwrap -try).
    ``src_fd`` binds an open descriptor instead of a path (bwrap --bind-fd).
    ``src`` is kept canonical (:func:`canonical`): a symlink named here is resolved
    now, and the launch binds that path without following any symlink in it."""

    src: str | None
    dest: str
    readonly: bool = False
    dev: bool = False
    optional: bool = False
    src_fd: int | None = None

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "bind destination"))
        if self.src_fd is not None:
            if self.src is not None:
                raise PolicyError("bind takes a source path or a descriptor, not both",
                                  Reason.CONFLICTING_OPTIONS, self.src)
            _set(self, "src_fd", check_fd(self.src_fd, "bind source descriptor"))
        else:
            # What a symlink the caller named points to NOW: the launch then binds this
            # path without following any symlink (one planted later fails closed).
            _set(self, "src", canonical(check_path(self.src, "bind source")))
        for flag in ("readonly", "dev", "optional"):
            if not isinstance(getattr(self, flag), bool):
                raise PolicyError(f"bind {flag} must be a bool", Reason.INVALID_VALUE, getattr(self, flag))


@_validated
@dataclass(frozen=True)
class Tmpfs:
    dest: str
    size: int | None = None
    mode: int | None = None

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "tmpfs destination"))
        _set(self, "size", check_size(self.size))
        _set(self, "mode", check_mode(self.mode, "tmpfs mode"))


@_validated
@dataclass(frozen=True)
class Proc:
    dest: str = "/proc"

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "proc destination"))


@_validated
@dataclass(frozen=True)
class Dev:
    """A minimal /dev: null zero full random urandom tty, fd links, devpts, shm."""

    dest: str = "/dev"

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "dev destination"))


@_validated
@dataclass(frozen=True)
class Mqueue:
    dest: str = "/dev/mqueue"

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "mqueue destination"))


@_validated
@dataclass(frozen=True)
class Dir:
    dest: str
    mode: int | None = None

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "dir"))
        _set(self, "mode", check_mode(self.mode, "dir mode"))


@_validated
@dataclass(frozen=True)
class Symlink:
    target: str
    dest: str

    def __post_init__(self):
        if not isinstance(self.target, str) or not self.target or "\x00" in self.target:
            raise PolicyError(f"symlink target must be a non-empty string without NUL: {self.target!r}",
                              Reason.INVALID_PATH, self.target)
        _set(self, "dest", check_path(self.dest, "symlink"))


@_validated
@dataclass(frozen=True)
class File:
    """A new file at ``dest`` holding ``data`` (bytes) or what is read from ``fd``.

    ``bind`` makes it a file of its own bind-mounted on dest (bwrap --bind-data),
    ``readonly`` with it (bwrap --ro-bind-data); without ``bind`` it is written in
    place (bwrap --file)."""

    dest: str
    data: bytes | None = None
    fd: int | None = None
    mode: int | None = None
    bind: bool = False
    readonly: bool = False

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "file"))
        if (self.data is None) == (self.fd is None):
            raise PolicyError("file takes exactly one of data or fd", Reason.CONFLICTING_OPTIONS, self.dest)
        if self.data is not None:
            if isinstance(self.data, str):
                _set(self, "data", self.data.encode())
            elif not isinstance(self.data, (bytes, bytearray)):
                raise PolicyError("file data must be bytes", Reason.INVALID_VALUE, self.data)
            else:
                _set(self, "data", bytes(self.data))
        else:
            _set(self, "fd", check_fd(self.fd, "file descriptor"))
        _set(self, "mode", check_mode(self.mode, "file mode"))
        if self.readonly and not self.bind:
            raise PolicyError("a read-only file must be bind-mounted (bind=True)",
                              Reason.CONFLICTING_OPTIONS, self.dest)


@_validated
@dataclass(frozen=True)
class RemountRo:
    """Make the mount at ``dest`` read-only (not recursive, as bwrap --remount-ro)."""

    dest: str

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "remount-ro"))


@_validated
@dataclass(frozen=True)
class Chmod:
    dest: str
    mode: int = 0o755

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "chmod path"))
        _set(self, "mode", check_mode(self.mode, "chmod mode"))
        if self.mode is None:
            raise PolicyError("chmod needs a mode", Reason.INVALID_MODE, None)


@_validated
@dataclass(frozen=True)
class Hide:
    """Cover ``path`` with an empty, read-only, inaccessible node (never created on the host).
    A path that does not exist is already hidden and is skipped; on the native backend,
    one that existed when the plan was made and cannot be reached at launch for any
    reason but having vanished (its last component missing) fails the launch."""

    path: str

    def __post_init__(self):
        _set(self, "path", check_path(self.path, "hide path"))


@_validated
@dataclass(frozen=True)
class Overlay:
    """An overlayfs on ``dest``: the host directories ``lower`` merged, the FIRST given
    at the bottom and the last on top (bubblewrap's ``--overlay-src`` order).

    Writes go to the host directory ``upper`` (with ``work``, an empty directory on the
    same filesystem, for the kernel's use: bwrap --overlay), or with ``tmp=True`` to an
    invisible tmpfs that vanishes with the sandbox (bwrap --tmp-overlay). With neither
    the overlay is read-only and needs at least two lowers (bwrap --ro-overlay).
    Mounted nosuid,nodev (bwrap sets neither: stricter)."""

    dest: str
    lower: tuple[str, ...] = ()
    upper: str | None = None
    work: str | None = None
    tmp: bool = False

    def __post_init__(self):
        _set(self, "dest", check_path(self.dest, "overlay destination"))
        if isinstance(self.lower, (str, bytes, os.PathLike)):
            raise PolicyError("overlay lower must be a collection of paths, not one path",
                              Reason.INVALID_VALUE, self.lower)
        lower = tuple(canonical(check_path(p, "overlay lower dir")) for p in _items(self.lower, "overlay lower"))
        _set(self, "lower", lower)
        if not isinstance(self.tmp, bool):
            raise PolicyError("overlay tmp must be a bool", Reason.INVALID_VALUE, self.tmp)
        if (self.upper is None) != (self.work is None):
            raise PolicyError("an overlay takes both an upper and a work directory, or neither",
                              Reason.CONFLICTING_OPTIONS, (self.upper, self.work))
        if self.upper is not None:
            if self.tmp:
                raise PolicyError("a tmp overlay writes to a tmpfs: it takes no upper or work directory",
                                  Reason.CONFLICTING_OPTIONS, self.upper)
            _set(self, "upper", canonical(check_path(self.upper, "overlay upper dir")))
            _set(self, "work", canonical(check_path(self.work, "overlay work dir")))
        least = 2 if self.upper is None and not self.tmp else 1
        if len(lower) < least:
            what = "a read-only overlay needs at least two lower directories" if least == 2 else \
                "an overlay needs at least one lower directory"
            raise PolicyError(what, Reason.INVALID_VALUE, lower)

    @property
    def writable(self) -> bool:
        """Writes reach the host (an upper directory)."""
        return self.upper is not None

    @property
    def sources(self) -> tuple[str, ...]:
        """The host directories it uses: lowers, then upper and work."""
        return self.lower + ((self.upper, self.work) if self.upper is not None else ())


FsOp = Union[Bind, Tmpfs, Proc, Dev, Mqueue, Dir, Symlink, File, RemountRo, Chmod, Hide, Overlay]
FS_OP_TYPES = (Bind, Tmpfs, Proc, Dev, Mqueue, Dir, Symlink, File, RemountRo, Chmod, Hide, Overlay)


def fs_dest(op: FsOp) -> str:
    return op.path if isinstance(op, Hide) else op.dest


# ---------------------------------------------------------------- network, environment

@_validated
@dataclass(frozen=True)
class Network:
    """``deny``: a new network namespace with only ``lo`` up. ``allow``: host network.
    ``proxy`` (with ``allow_hosts``) is modelled but fails closed with
    ``network_mode_unsupported`` until it is built."""

    mode: str = "deny"
    allow_hosts: tuple[str, ...] = ()

    def __post_init__(self):
        if self.mode not in NETWORK_MODES:
            raise PolicyError(f"network mode must be one of {', '.join(NETWORK_MODES)}: {self.mode!r}",
                              Reason.INVALID_VALUE, self.mode)
        hosts = _items(self.allow_hosts, "allow_hosts")
        if any(not isinstance(h, str) or not h for h in hosts):
            raise PolicyError("allow_hosts must be non-empty strings", Reason.INVALID_VALUE, hosts)
        if hosts and self.mode != "proxy":
            raise PolicyError("allow_hosts needs network mode 'proxy'", Reason.CONFLICTING_OPTIONS, hosts)
        _set(self, "allow_hosts", hosts)

    @property
    def implemented(self) -> bool:
        return self.mode in IMPLEMENTED_NETWORK_MODES

    @property
    def new_namespace(self) -> bool:
        return self.mode != "allow"


@_validated
@dataclass(frozen=True)
class Env:
    """Environment operations, applied to the caller's environment at launch:
    start from it (or from nothing if ``clear``, or from only the ``keep`` names it
    has, if ``keep`` is given), then unset, then set.

    By default the caller's whole environment reaches the command, secrets included
    (``AWS_*``, ``GITHUB_TOKEN``, ...): ``keep`` is the allow-list that stops that.

    Raises:
        PolicyError: a bad name or value (``invalid_value``); ``keep`` with ``clear``
            (``conflicting_options``: keep already drops everything else).
    """

    clear: bool = False
    set: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()
    keep: tuple[str, ...] | None = None

    def __post_init__(self):
        pairs = tuple(self.set.items()) if isinstance(self.set, Mapping) else _items(self.set, "environment set")
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise PolicyError(f"environment entry must be (name, value): {pair!r}", Reason.INVALID_VALUE, pair)
            name, value = pair
            _check_env_name(name)
            if not isinstance(value, str) or "\x00" in value:
                raise PolicyError(f"environment value must be a string without NUL: {value!r}",
                                  Reason.INVALID_VALUE, value)
        for name in _items(self.unset, "environment unset"):
            _check_env_name(name)
        _set(self, "set", pairs)
        _set(self, "unset", tuple(self.unset))
        if not isinstance(self.clear, bool):
            raise PolicyError("clear must be a bool", Reason.INVALID_VALUE, self.clear)
        if self.keep is not None:
            if isinstance(self.keep, str):
                raise PolicyError("keep must be a collection of names, not one string",
                                  Reason.INVALID_VALUE, self.keep)
            keep = _items(self.keep, "environment keep")
            for name in keep:
                _check_env_name(name)
            if self.clear:
                raise PolicyError("environment keep already drops every other variable: do not also clear",
                                  Reason.CONFLICTING_OPTIONS, keep)
            _set(self, "keep", tuple(dict.fromkeys(keep)))

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        if self.clear:
            env = {}
        elif self.keep is not None:
            env = {name: base[name] for name in self.keep if name in base}
        else:
            env = dict(base)
        for name in self.unset:
            env.pop(name, None)
        for name, value in self.set:
            env[name] = value
        return env


def _check_env_name(name):
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise PolicyError(f"environment name must be non-empty, without '=' or NUL: {name!r}",
                          Reason.INVALID_VALUE, name)


# ---------------------------------------------------------------- the policy

@_validated
@dataclass(frozen=True)
class Policy:
    """What the sandbox may see and do.

    ``fs`` is applied in order, as bubblewrap applies its options: a later
    operation on a path shadows an earlier one. ``namespaces`` lists what is
    unshared besides the network namespace, which ``network`` decides.

    Raises:
        PolicyError: any invalid field, with ``.reason`` and ``.value``.
    """

    fs: tuple = ()
    namespaces: frozenset = frozenset({"user", "pid", "ipc", "uts"})
    network: Network = field(default_factory=Network)
    env: Env = field(default_factory=Env)
    chdir: str | None = None
    uid: int | None = None
    gid: int | None = None
    hostname: str | None = None
    die_with_parent: bool = True
    new_session: bool = True
    as_pid_1: bool = False
    caps_keep: frozenset = frozenset()
    pass_fds: tuple[int, ...] = ()
    allow_nested_userns: bool = False
    seccomp: tuple[bytes, ...] = ()
    argv0: str | None = None
    keep_authority_sockets: bool = False   # deny mode: keep docker/ssh-agent/... sockets (authority.py)
    strict_unix: bool = False              # seccomp: socket(AF_UNIX) refused, socketpair allowed
    allow_io_uring: bool = False           # seccomp: io_uring_* allowed (network allow, not strict_unix)
    allow_host_mountpoints: bool = False   # pybwrap only: a missing mount point inside a writable
                                           # host bind is created on the host, as bwrap does
    block_fd: int | None = None            # setup waits for a byte or EOF here before the command
    userns_block_fd: int | None = None     # setup waits here before any id map: the caller writes them
    userns_fd: int | None = None           # join this user namespace instead of creating one
    pidns_fd: int | None = None            # join this pid namespace ("pid": a new one inside it)
    userns2_fd: int | None = None          # after the setup, switch to this user namespace

    def __post_init__(self):
        fs = _items(self.fs, "fs")
        for op in fs:
            if not isinstance(op, FS_OP_TYPES):
                raise PolicyError(f"not a filesystem operation: {op!r}", Reason.INVALID_VALUE, op)
        _set(self, "fs", fs)
        if isinstance(self.namespaces, str):
            raise PolicyError("namespaces must be a collection of names", Reason.INVALID_VALUE, self.namespaces)
        ns = frozenset(n for n in _items(self.namespaces, "namespaces") if _hashable(n, "namespaces"))
        unknown = ns - set(NAMESPACES)
        if unknown:
            raise PolicyError(f"unknown namespaces: {sorted(unknown)}", Reason.INVALID_VALUE, sorted(unknown))
        if "net" in ns:
            raise PolicyError("the network namespace is chosen by network mode, not listed in namespaces",
                              Reason.CONFLICTING_OPTIONS, "net")
        if "user" not in ns:
            raise PolicyError("pysandbox always uses a user namespace", Reason.CONFLICTING_OPTIONS, "user")
        _set(self, "namespaces", ns)
        if isinstance(self.network, str):
            _set(self, "network", Network(self.network))
        elif not isinstance(self.network, Network):
            raise PolicyError("network must be a mode string or Network", Reason.INVALID_VALUE, self.network)
        if not isinstance(self.env, Env):
            raise PolicyError("env must be an Env", Reason.INVALID_VALUE, self.env)
        if self.chdir is not None:
            _set(self, "chdir", check_path(self.chdir, "chdir"))
        _set(self, "uid", check_id(self.uid, "uid"))
        _set(self, "gid", check_id(self.gid, "gid"))
        if self.hostname is not None:
            if not isinstance(self.hostname, str) or not _HOSTNAME.match(self.hostname):
                raise PolicyError(f"hostname must be 1-63 letters, digits, '.' or '-': {self.hostname!r}",
                                  Reason.INVALID_VALUE, self.hostname)
            if "uts" not in ns:
                raise PolicyError("a hostname needs the uts namespace", Reason.CONFLICTING_OPTIONS, self.hostname)
        for flag in ("die_with_parent", "new_session", "as_pid_1", "allow_nested_userns",
                     "keep_authority_sockets", "strict_unix", "allow_io_uring", "allow_host_mountpoints"):
            if not isinstance(getattr(self, flag), bool):
                raise PolicyError(f"{flag} must be a bool", Reason.INVALID_VALUE, getattr(self, flag))
        if self.allow_io_uring and (self.strict_unix or self.network.new_namespace):
            # io_uring makes sockets (IORING_OP_SOCKET/CONNECT) that no seccomp filter sees:
            # it would bypass strict_unix and deny mode's socket-family refusals (seccomp.py).
            raise PolicyError("allow_io_uring needs network 'allow' and no strict_unix: io_uring creates "
                              "and connects sockets without the system calls the seccomp filters check, "
                              "so it would bypass strict_unix and the AF_VSOCK refusal of network "
                              f"{self.network.mode!r}", Reason.CONFLICTING_OPTIONS, "allow_io_uring")
        if self.as_pid_1 and "pid" not in ns:
            raise PolicyError("as_pid_1 needs the pid namespace", Reason.CONFLICTING_OPTIONS, "as_pid_1")
        caps = frozenset(_cap_name(c) for c in _items(self.caps_keep, "caps_keep"))
        _set(self, "caps_keep", caps)
        fds = tuple(check_fd(fd, "pass_fds entry") for fd in _items(self.pass_fds, "pass_fds"))
        if any(fd < 3 for fd in fds):
            raise PolicyError("pass_fds must be >= 3 (stdio is always passed)", Reason.INVALID_VALUE, fds)
        _set(self, "pass_fds", tuple(sorted(set(fds))))
        progs = _items(self.seccomp, "seccomp")
        for prog in progs:
            if not isinstance(prog, (bytes, bytearray)) or not prog or len(prog) % 8 or len(prog) > 8 * 4096:
                raise PolicyError("a seccomp program is classic BPF: a non-empty multiple of 8 bytes, "
                                  "at most 4096 instructions", Reason.INVALID_VALUE, prog)
        _set(self, "seccomp", tuple(bytes(p) for p in progs))
        self._check_block_fds(fds)
        if self.argv0 is not None and (not isinstance(self.argv0, str) or "\x00" in self.argv0):
            raise PolicyError("argv0 must be a string without NUL", Reason.INVALID_VALUE, self.argv0)

    def _check_block_fds(self, passed) -> None:
        for name in ("block_fd", "userns_block_fd", "userns_fd", "pidns_fd", "userns2_fd"):
            value = getattr(self, name)
            if value is not None:
                value = check_fd(value, name)
                _set(self, name, value)
                if value in passed and name.endswith("block_fd"):   # setns leaves the others open
                    raise PolicyError(f"{name} {value} is consumed by the setup; it cannot also be in pass_fds",
                                      Reason.CONFLICTING_OPTIONS, value)
        if self.block_fd is not None and self.block_fd == self.userns_block_fd:
            raise PolicyError("block_fd and userns_block_fd must be different descriptors (each is closed "
                              "after its wait)", Reason.CONFLICTING_OPTIONS, self.block_fd)
        for name in ("userns_block_fd", "userns_fd"):
            if getattr(self, name) is not None and (self.uid is not None or self.gid is not None):
                raise PolicyError(f"with {name} the id maps are not ours to write: uid and gid cannot be set",
                                  Reason.CONFLICTING_OPTIONS, (self.uid, self.gid))
        if self.userns_fd is not None:
            if self.userns_block_fd is not None:
                raise PolicyError("userns_fd joins a user namespace, userns_block_fd waits in a new one",
                                  Reason.CONFLICTING_OPTIONS, self.userns_fd)
            if not self.allow_nested_userns:
                raise PolicyError("disabling nested user namespaces limits the sandbox's own user namespace "
                                  "for good; a joined one (userns_fd) is not ours to limit: set "
                                  "allow_nested_userns=True", Reason.CONFLICTING_OPTIONS, self.userns_fd)

    # -- constructors ---------------------------------------------------------------

    @classmethod
    def default(cls, workdir=None, network: str = "deny", ro: Iterable = (), rw: Iterable = (),
                hide: Iterable = (), tmpfs: Iterable = (), **overrides) -> "Policy":
        """The default policy (README.md, "The policy").

        ``/`` read-only, ``workdir`` (if given; never ``/`` itself) read-write and the initial directory
        (``workdir``, ``ro`` and ``rw`` paths are taken as the host resolves their
        symlinks when the policy is built, and bound at that canonical path),
        fresh ``/proc``, minimal ``/dev``, private ``/tmp``; new user, mount, pid, ipc,
        uts and (network deny) net namespaces; die with parent; new session. Extra
        ``ro``/``rw`` binds keep their host path; ``hide`` covers paths; ``tmpfs``
        adds private tmpfs mounts. Nested paths are applied parents first. In network
        deny mode the well-known Unix-socket authority (authority.py) that exists now is
        masked and its variables unset, unless ``keep_authority_sockets=True``.

        Raises:
            PolicyError: a bad path, a missing bind source, or a bad override;
                ``workdir_too_broad`` for the workdir ``/``.
        """
        items = []  # (depth, rank, op): parents before children, then by kind
        # A path given as a symlink is bound where it points now, at that (canonical)
        # path: the symlink, seen through the read-only /, leads there in the sandbox.
        for path in _paths(ro, "ro"):
            path = canonical(path)
            items.append((path, 0, Bind(path, path, readonly=True)))
        for path in _paths(rw, "rw"):
            path = canonical(path)
            items.append((path, 0, Bind(path, path)))
        if workdir is not None:
            wd = canonical(check_path(_absolute(workdir), "workdir"))
            if wd == "/":   # also a symlink to /: checked where it points
                raise PolicyError("workdir '/' would bind the whole host filesystem read-write: name a "
                                  "project directory (or none)", Reason.WORKDIR_TOO_BROAD, wd)
            items.append((wd, 0, Bind(wd, wd)))
            overrides.setdefault("chdir", wd)
        for path in _paths(tmpfs, "tmpfs"):
            items.append((path, 1, Tmpfs(path)))
        for path in _paths(hide, "hide"):
            items.append((path, 2, Hide(path)))
        net_mode = network if isinstance(network, str) else getattr(network, "mode", None)
        if net_mode != "allow" and not overrides.get("keep_authority_sockets", False):
            # Network deny: mask the known authority sockets that exist now and drop the
            # variables that advertise them (see authority.py for the exact coverage).
            from . import authority
            for sock in authority.present():
                items.append((sock.path, 2, Hide(sock.path)))
            env = overrides.get("env", Env())
            if isinstance(env, Env):
                overrides["env"] = dataclasses.replace(
                    env, unset=tuple(env.unset) + tuple(v for v in authority.ENV_VARIABLES if v not in env.unset))
        items.sort(key=lambda t: (t[0].count("/") if t[0] != "/" else 0, t[1]))
        fs = (Bind("/", "/", readonly=True), Dev("/dev"), Proc("/proc"), Tmpfs("/tmp")) + tuple(
            op for _, _, op in items)
        for op in fs:
            if isinstance(op, Bind):
                check_bind_source(op)
        return cls(fs=fs, network=Network(network) if isinstance(network, str) else network, **overrides)

    def replace(self, **changes) -> "Policy":
        return dataclasses.replace(self, **changes)

    @property
    def writable_paths(self) -> tuple[str, ...]:
        """Sandbox paths that end up writable and backed by the host (rw binds, overlays
        with an upper directory)."""
        return tuple(op.dest for op in self.fs
                     if (isinstance(op, Bind) and not op.readonly) or (isinstance(op, Overlay) and op.writable))


def _absolute(path):
    """A relative workdir is taken relative to the caller's current directory."""
    try:
        text = os.fspath(path)
    except TypeError:
        return path  # check_path reports the type
    if isinstance(text, str) and text and "\x00" not in text and not text.startswith("/"):
        return os.path.abspath(text)
    return text


def _paths(values, what) -> list[str]:
    if values is None:
        return []
    if isinstance(values, (str, bytes, os.PathLike)):
        values = [values]
    try:
        values = list(values)
    except TypeError:
        raise PolicyError(f"{what} must be a path or a list of paths: {values!r}",
                          Reason.INVALID_PATH, values) from None
    return [check_path(v, f"{what} path") for v in values]


def _cap_name(cap) -> str:
    if not isinstance(cap, str):
        raise PolicyError(f"capability must be a name: {cap!r}", Reason.INVALID_VALUE, cap)
    name = cap.lower().removeprefix("cap_")
    if name not in CAPABILITIES:
        raise PolicyError(f"unknown capability: {cap!r}", Reason.INVALID_VALUE, cap)
    return name


def check_bind_source(op: Bind) -> None:
    """A bind source must exist unless the bind is optional (checked before any launch)."""
    if op.src is None or op.optional:
        return
    if not os.path.lexists(op.src):
        raise PolicyError(f"bind source does not exist: {op.src}", Reason.BIND_SOURCE_MISSING, op.src)


def check_overlay_sources(op: Overlay) -> None:
    """Every directory of an overlay must exist on the host (checked before any launch,
    as a bind source: ``bind_source_missing``)."""
    for src in op.sources:
        if not os.path.lexists(src):
            raise PolicyError(f"overlay source does not exist: {src}", Reason.BIND_SOURCE_MISSING, src)
