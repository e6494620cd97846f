"""Validation helpers shared by the Policy records: each turns one user value into
its checked form or raises :class:`~pysandbox.errors.PolicyError` with a reason and the
offending value. Pure, except :func:`canonical` (realpath) for host paths."""

from __future__ import annotations

import os

from .errors import PolicyError, Reason

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
# the network modes a backend can build (policy.Network.implemented, backends/base.py)
IMPLEMENTED_NETWORK_MODES = ("deny", "allow", "proxy")
# network proxy mode's bounds and their defaults (policy.Network, pysandbox/proxy/server.py)
PROXY_BOUNDS = {"head_timeout": 10.0, "idle_timeout": 300.0, "max_connections": 1024}


def shown(path: str) -> str:
    """``path`` quoted for a message: as written where every character is printable or a
    byte that is not UTF-8 (the surrogateescape form, which the CLI writes back as that
    byte: cli_errors.write_line), else ``repr`` (control characters stay visible)."""
    if all(ch.isprintable() or "\udc80" <= ch <= "\udcff" for ch in path):
        return f"'{path}'"
    return repr(path)


def check_path(path, what: str = "path", field: str | None = None) -> str:
    """An absolute, NUL-free path, normalised (no '.', '..' or repeated '/'). ``field``
    goes on the PolicyError (the option the CLI names)."""
    try:
        return _check_path(path, what)
    except PolicyError as exc:
        exc.field = exc.field or field
        raise


def _check_path(path, what: str) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    # Paths are bytes to the kernel: bytes that are not UTF-8 are kept in the str form
    # os.fsdecode gives them (surrogateescape), and every backend passes them on with
    # os.fsencode; a str that no bytes decode to (a lone surrogate) is refused below.
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        raise PolicyError(f"{what} must be a string, not {type(path).__name__}", Reason.INVALID_PATH, path)
    if not path or "\x00" in path:
        raise PolicyError(f"{what} is empty or contains NUL: {path!r}", Reason.INVALID_PATH, path)
    if not path.startswith("/"):
        raise PolicyError(f"{what} must be absolute: {shown(path)}", Reason.INVALID_PATH, path)
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise PolicyError(f"{what} is not a byte string's text form (a lone surrogate): {path!r}",
                          Reason.INVALID_PATH, path) from None
    if len(raw) >= 4096:
        raise PolicyError(f"{what} is longer than PATH_MAX: {shown(path[:40])}...", Reason.INVALID_PATH, path)
    parts = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise PolicyError(f"{what} must not contain '..': {shown(path)}", Reason.INVALID_PATH, path)
        if len(os.fsencode(part)) > 255:
            raise PolicyError(f"{what} has a component longer than NAME_MAX: {shown(path[:40])}...",
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


def set_field(obj, name, value):
    object.__setattr__(obj, name, value)


def validated(cls):
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


def as_tuple(value, what: str) -> tuple:
    """``tuple(value)``, with a PolicyError instead of a TypeError for a non-collection."""
    try:
        return tuple(value)
    except TypeError:
        raise PolicyError(f"{what} must be a collection, not {type(value).__name__}",
                          Reason.INVALID_VALUE, value) from None


def require_hashable(item, what: str) -> bool:
    try:
        hash(item)
    except TypeError:
        raise PolicyError(f"{what} entries must be names: {item!r}", Reason.INVALID_VALUE, item) from None
    return True


def check_proxy_bounds(network) -> None:
    """``network``'s head_timeout and idle_timeout are positive seconds, its
    max_connections a count; none differs from its default outside mode ``proxy``."""
    for name in ("head_timeout", "idle_timeout"):
        value = getattr(network, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
            raise PolicyError(f"{name} must be a positive number of seconds: {value!r}", Reason.INVALID_VALUE,
                              value, field=name)
    count = network.max_connections
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**31:
        raise PolicyError(f"max_connections must be a non-negative integer: {count!r}", Reason.INVALID_VALUE,
                          count, field="max_connections")
    for name, default in PROXY_BOUNDS.items():
        if network.mode != "proxy" and getattr(network, name) != default:
            raise PolicyError(f"{name} needs network mode 'proxy'", Reason.CONFLICTING_OPTIONS,
                              getattr(network, name), field=name)
