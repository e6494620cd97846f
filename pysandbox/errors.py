"""One error tree for the whole library, each error carrying a stable reason code.

SandboxError
├─ PolicyError(ValueError)             invalid policy; BwrapArgumentError
├─ BackendUnavailable(RuntimeError)    BwrapNotFound, SetuidRejected, NativeModuleMissing,
│                                      BwrapOptionUnsupported, BwrapProbeFailed
├─ CapabilityUnavailable(OSError)      UserNamespaceUnavailable, NetworkNamespaceUnavailable,
│                                      LimitUnavailable, ...
├─ SessionError(RuntimeError)          a session cannot start, is closed or was lost
├─ WorkspaceError(RuntimeError)        a workspace refused a review or commit; WorkspaceConflict
└─ SetupError(OSError)                 .stage .op .errno .filename

Tests assert on ``.reason``, never on the message text.
"""

from __future__ import annotations

from .records import TYPE_CHECKING

if TYPE_CHECKING:
    from enum import Enum as Codes   # what the type checker sees; codes.py behaves as it
else:
    from .codes import Codes   # enum's behaviour without importing enum (issue 28)


class Reason(str, Codes):
    """Stable snake_case reason codes. Never reuse one for another meaning."""

    # host capabilities
    USER_NAMESPACE_UNAVAILABLE = "user_namespace_unavailable"
    MOUNT_NAMESPACE_UNAVAILABLE = "mount_namespace_unavailable"
    PID_NAMESPACE_UNAVAILABLE = "pid_namespace_unavailable"
    NETWORK_NAMESPACE_UNAVAILABLE = "network_namespace_unavailable"
    LOOPBACK_SETUP_FAILED = "loopback_setup_failed"
    PROC_MOUNT_FAILED = "proc_mount_failed"
    SECCOMP_UNAVAILABLE = "seccomp_unavailable"
    LIFETIME_MONITOR_UNAVAILABLE = "lifetime_monitor_unavailable"
    # backends
    NATIVE_MODULE_MISSING = "native_module_missing"
    BWRAP_NOT_FOUND = "bwrap_not_found"
    BWRAP_SETUID_REJECTED = "bwrap_setuid_rejected"
    BWRAP_PROBE_FAILED = "bwrap_probe_failed"
    BWRAP_OPTION_UNSUPPORTED = "bwrap_option_unsupported"
    BWRAP_IN_WRITABLE_PATH = "bwrap_in_writable_path"
    NETWORK_MODE_UNSUPPORTED = "network_mode_unsupported"
    BWRAP_INIT_UNAVAILABLE = "bwrap_init_unavailable"
    TERMINAL_UNAVAILABLE = "terminal_unavailable"
    # resource limits (pysandbox/limits.py, pysandbox/cgroup.py)
    CGROUP_UNAVAILABLE = "cgroup_unavailable"
    CONTROLLER_NOT_DELEGATED = "controller_not_delegated"
    # launch
    SETUP_FAILED = "setup_failed"
    PARENT_DIED = "parent_died"
    SYMLINK_IN_PATH = "symlink_in_path"
    BIND_SOURCE_CHANGED = "bind_source_changed"
    # policy (user input)
    INVALID_PATH = "invalid_path"
    WORKDIR_TOO_BROAD = "workdir_too_broad"
    WRITABLE_PATH_TOO_BROAD = "writable_path_too_broad"
    BIND_SOURCE_MISSING = "bind_source_missing"
    MOUNT_POINT_MISSING = "mount_point_missing"
    INVALID_MODE = "invalid_mode"
    INVALID_SIZE = "invalid_size"
    INVALID_VALUE = "invalid_value"
    CONFLICTING_OPTIONS = "conflicting_options"
    BWRAP_ARGUMENT_INVALID = "bwrap_argument_invalid"
    SESSION_UNAVAILABLE = "session_unavailable"
    SESSION_CLOSED = "session_closed"
    SESSION_LOST = "session_lost"
    ALLOW_LIST_WIDENED = "allow_list_widened"
    # workspaces (workspace.py, workspace_commit.py)
    WORKSPACE_CONFLICT = "workspace_conflict"
    WORKSPACE_CHANGED = "workspace_changed"
    WORKSPACE_UNSAFE_ENTRY = "workspace_unsafe_entry"
    WORKSPACE_FILE_TOO_LARGE = "workspace_file_too_large"
    WORKSPACE_LAYER_INVALID = "workspace_layer_invalid"

    def __str__(self) -> str:  # so f"{reason}" prints the code
        return self.value


class SandboxError(Exception):
    """Base of every pysandbox error. ``reason`` is a :class:`Reason`."""

    default_reason: Reason = Reason.SETUP_FAILED

    def __init__(self, message: str, reason: Reason | None = None, **details):
        super().__init__(message)
        self.reason = Reason(reason) if reason is not None else self.default_reason
        self.details = details

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.args[0] if self.args else ''}"


class PolicyError(SandboxError, ValueError):
    """The policy is invalid; ``value`` holds the offending input, ``field`` (when known)
    the Policy field or ``Policy.default`` argument it came from (``"chdir"``,
    ``"hide"``, ``"tmpfs"``, ``"workdir"``, ...): the CLI names the user's option from it."""

    default_reason = Reason.INVALID_VALUE

    def __init__(self, message: str, reason: Reason | None = None, value=None, field: str | None = None):
        super().__init__(message, reason)
        self.value = value
        self.field = field


class BwrapArgumentError(PolicyError):
    """A bubblewrap command line could not be parsed (bwrap_compat). Where pybwrap raises
    one it may say how bwrap prints it: ``usage`` (the usage text too), ``level_prefix``
    (``--level-prefix``) and ``warnings`` (printed before the error)."""

    default_reason = Reason.BWRAP_ARGUMENT_INVALID
    usage: bool = False
    level_prefix: bool = False
    warnings: list[str]   # set where raised; read with getattr(exc, "warnings", ())


class StartDirectoryMissing(PolicyError, FileNotFoundError):
    """No directory where the command is to start (``cwd=``, ``chdir``): one rule for a
    one-shot launch, which checks the sandbox's view before it starts, and a session,
    whose server finds out at its chdir. A :class:`PolicyError` (``invalid_path``) and,
    as ``subprocess`` raises it, a :class:`FileNotFoundError` (``errno`` ENOENT or
    ENOTDIR, ``filename`` the sandbox path)."""

    default_reason = Reason.INVALID_PATH

    def __init__(self, message: str, path=None, errno: int = 2, field: str | None = None):
        super().__init__(message, Reason.INVALID_PATH, path, field=field)
        self.errno, self.strerror, self.filename = errno, message, path


class BackendUnavailable(SandboxError, RuntimeError):
    """The chosen backend cannot run here."""


class BwrapNotFound(BackendUnavailable):
    default_reason = Reason.BWRAP_NOT_FOUND


class SetuidRejected(BackendUnavailable):
    default_reason = Reason.BWRAP_SETUID_REJECTED


class BwrapOptionUnsupported(BackendUnavailable):
    default_reason = Reason.BWRAP_OPTION_UNSUPPORTED


class BwrapProbeFailed(BackendUnavailable):
    default_reason = Reason.BWRAP_PROBE_FAILED


class NativeModuleMissing(BackendUnavailable):
    default_reason = Reason.NATIVE_MODULE_MISSING


class CapabilityUnavailable(SandboxError, OSError):
    """The host cannot provide an isolation the policy asks for."""

    def __init__(self, message: str, reason: Reason | None = None, errno: int | None = None, **details):
        SandboxError.__init__(self, message, reason, **details)
        self.errno = errno
        self.strerror = message


class UserNamespaceUnavailable(CapabilityUnavailable):
    default_reason = Reason.USER_NAMESPACE_UNAVAILABLE


class NetworkNamespaceUnavailable(CapabilityUnavailable):
    default_reason = Reason.NETWORK_NAMESPACE_UNAVAILABLE


class NetworkModeUnsupported(CapabilityUnavailable):
    default_reason = Reason.NETWORK_MODE_UNSUPPORTED


class LimitUnavailable(CapabilityUnavailable):
    """A requested resource limit cannot be enforced here (no cgroup with its controller:
    ``cgroup_unavailable``; one the launcher may not create a cgroup in or write:
    ``controller_not_delegated``). ``limit`` names it (``"memory"``, ``"pids"``)."""

    default_reason = Reason.CGROUP_UNAVAILABLE

    def __init__(self, message: str, reason: Reason | None = None, errno: int | None = None,
                 limit: str | None = None, **details):
        super().__init__(message, reason, errno, **details)
        self.limit = limit


class SessionError(SandboxError, RuntimeError):
    """A session (pysandbox/session.py) cannot start, is closed, or was lost."""

    default_reason = Reason.SESSION_LOST


class SetupError(SandboxError, OSError):
    """A setup step failed after the launch began; the command never ran.

    ``stage`` names the step (``"bind"``, ``"proc"``, ...), ``op`` its index in the
    plan (or None), ``errno`` the kernel's errno, ``filename`` the path involved.
    """

    mount_options: str | None = None   # an overlay mount the kernel refused: its options

    def __init__(self, message: str, reason: Reason | None = None, *, stage: str | None = None,
                 op: int | None = None, errno: int | None = None, filename: str | None = None):
        SandboxError.__init__(self, message, reason)
        self.stage = stage
        self.op = op
        self.errno = errno
        self.strerror = message
        self.filename = filename


class WorkspaceError(SandboxError, RuntimeError):
    """A workspace refused a review or a commit (workspace.py, workspace_commit.py);
    ``paths`` names the project-relative paths concerned (``str``, non-UTF-8 bytes as
    surrogate escapes). Nothing was applied.

    Reasons: ``workspace_changed`` (the layer is not what ``Workspace.changes``
    reviewed), ``workspace_unsafe_entry`` (a setuid/setgid entry, a device node or a
    socket), ``workspace_file_too_large`` (over ``max_file_size``),
    ``workspace_layer_invalid`` (the layer changed under the review), ``invalid_path``
    (a path to commit that is not a change)."""

    default_reason = Reason.WORKSPACE_LAYER_INVALID

    def __init__(self, message: str, reason: Reason | None = None, paths=()):
        super().__init__(message, reason)
        self.paths = tuple(paths)


class WorkspaceConflict(WorkspaceError):
    """A host entry the commit would replace or delete changed since the workspace was
    opened: ``paths`` lists them; nothing was applied."""

    default_reason = Reason.WORKSPACE_CONFLICT


_BY_REASON: dict[Reason, type[SandboxError]] = {
    Reason.SESSION_UNAVAILABLE: SessionError,
    Reason.SESSION_CLOSED: SessionError,
    Reason.SESSION_LOST: SessionError,
    Reason.ALLOW_LIST_WIDENED: PolicyError,
    Reason.USER_NAMESPACE_UNAVAILABLE: UserNamespaceUnavailable,
    Reason.NETWORK_NAMESPACE_UNAVAILABLE: NetworkNamespaceUnavailable,
    Reason.NETWORK_MODE_UNSUPPORTED: NetworkModeUnsupported,
    Reason.MOUNT_NAMESPACE_UNAVAILABLE: CapabilityUnavailable,
    Reason.PID_NAMESPACE_UNAVAILABLE: CapabilityUnavailable,
    Reason.LOOPBACK_SETUP_FAILED: CapabilityUnavailable,
    Reason.PROC_MOUNT_FAILED: CapabilityUnavailable,
    Reason.SECCOMP_UNAVAILABLE: CapabilityUnavailable,
    Reason.LIFETIME_MONITOR_UNAVAILABLE: CapabilityUnavailable,
    Reason.BWRAP_NOT_FOUND: BwrapNotFound,
    Reason.BWRAP_SETUID_REJECTED: SetuidRejected,
    Reason.BWRAP_OPTION_UNSUPPORTED: BwrapOptionUnsupported,
    Reason.BWRAP_PROBE_FAILED: BwrapProbeFailed,
    Reason.BWRAP_IN_WRITABLE_PATH: BackendUnavailable,
    Reason.NATIVE_MODULE_MISSING: NativeModuleMissing,
    Reason.BWRAP_INIT_UNAVAILABLE: BackendUnavailable,
    Reason.CGROUP_UNAVAILABLE: LimitUnavailable,
    Reason.CONTROLLER_NOT_DELEGATED: LimitUnavailable,
    Reason.WORKSPACE_CONFLICT: WorkspaceConflict,
    Reason.WORKSPACE_CHANGED: WorkspaceError,
    Reason.WORKSPACE_UNSAFE_ENTRY: WorkspaceError,
    Reason.WORKSPACE_FILE_TOO_LARGE: WorkspaceError,
    Reason.WORKSPACE_LAYER_INVALID: WorkspaceError,
}


def error_for(reason: Reason, message: str, **details) -> SandboxError:
    """Build the error class that belongs to ``reason`` (the one mapping boundary)."""
    cls = _BY_REASON.get(Reason(reason))
    if cls is None:
        return SetupError(message, reason, **{k: v for k, v in details.items()
                                               if k in ("stage", "op", "errno", "filename")})
    return cls(message, reason, **details) if issubclass(cls, CapabilityUnavailable) else cls(message, reason)
