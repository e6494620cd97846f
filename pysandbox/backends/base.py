"""The interface every backend implements.

A backend turns a :class:`~pysandbox.plan.Plan` into a running sandbox. ``spawn``
returns only once the command was executed (native: EOF on the error pipe) or
raises a typed error, so a failed setup never looks like a command's exit status.

Here: :class:`Launch`, the :class:`Child` and :class:`Backend` protocols, the status
records (:class:`CapabilityStatus`, :class:`BackendStatus`, :func:`backend_down` for a backend
that cannot run here at all) and :func:`check_network_mode`, the one rule every backend applies to a plan's network.
"""

from __future__ import annotations

from ..errors import NetworkModeUnsupported, Reason
from ..records import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:   # the protocols are for type checkers; at run time they are plain classes
    from typing import Callable, Protocol
else:
    Protocol = object


@dataclass
class Launch:
    """Everything a launch needs besides the plan, prepared by the process layer."""

    argv: list[str]
    env: dict[str, str]
    stdin: int = 0        # descriptors in the caller to become 0, 1, 2 in the sandbox
    stdout: int = 1
    stderr: int = 2
    pass_fds: tuple[int, ...] = ()
    executable: str | None = None   # resolved in the sandbox's view; argv[0] stays as given
    # Called once with the host pid of the sandbox's first process as soon as it exists,
    # before its setup (native) or before the command is executed (bwrap), on another
    # thread: a Policy.userns_block_fd caller writes the id maps of that pid from here.
    on_start: Callable[[int], None] | None = None
    close_in_setup: tuple[int, ...] = ()   # closed by the setup process before any step
    # The sandbox's own terminal (pysandbox/terminal.py): a unix socket over which the
    # setup, right before the exec, sends the master of a pty it opened in the sandbox's
    # devpts; the slave becomes the command's controlling terminal and replaces the
    # stdio descriptors whose bit (1 << n) is in pty_stdio. pty_winsize: (rows, cols).
    pty_socket: int | None = None
    pty_stdio: int = 0
    pty_winsize: tuple[int, int] | None = None
    # Resource limits (pysandbox/cgroup.py): the cgroup.procs files the sandbox is placed
    # in before any of its setup runs (native: its first process's pid, written before
    # any step; bwrap: the forked child writes itself before it execs bwrap).
    cgroup_procs: tuple[str, ...] = ()
    # Network proxy mode (pysandbox/egress.py): a unix socket over which the setup,
    # inside the new network namespace and before the command exists, sends the
    # listener(s) it made at the plan's ProxyListener port (SCM_RIGHTS).
    proxy_socket: int | None = None
    # Policy.report_denials (pysandbox/denials.py): a unix socket over which the setup,
    # right after it loads the Seccomp op marked notify, sends that filter's listener.
    notify_socket: int | None = None


def pack_winsize(winsize: tuple[int, int] | None) -> int:
    """``rows << 16 | cols`` for the setup (0: leave the new pty's size as it is)."""
    if winsize is None:
        return 0
    rows, cols = winsize
    return (rows & 0xFFFF) << 16 | (cols & 0xFFFF)


class Child(Protocol):
    """A launched sandbox, as seen from the host."""

    pid: int   # the host pid to wait for and to signal: killing it ends the whole sandbox

    def returncode(self, wait_status: int) -> int:
        """The command's returncode (negative for a signal) given the wait status of ``pid``."""

    def forward_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the command (the one entry for every signal but SIGKILL).
        Raises ProcessLookupError when nothing is left to receive it."""

    def kill_sandbox(self) -> None:
        """What SIGKILL of the whole sandbox needs before ``pid`` itself is SIGKILLed."""

    def close(self) -> None:
        """Release what the launch kept open (status pipes); idempotent."""


@dataclass
class CapabilityStatus:
    name: str                   # user, mount, pid, net, proc, loopback, seccomp ...
    available: bool
    reason: str | None = None   # a Reason value when not available
    detail: str = ""


@dataclass
class BackendStatus:
    backend: str
    available: bool
    reason: str | None = None
    detail: str = ""
    capabilities: list[CapabilityStatus] = field(default_factory=list)
    network: dict[str, CapabilityStatus] = field(default_factory=dict)   # mode -> status
    info: dict = field(default_factory=dict)   # version, path, setuid ...


class Backend(Protocol):
    name: str

    def check(self, plan) -> None:
        """Raise the typed error if this backend cannot run ``plan`` here (cached per plan)."""

    def spawn(self, plan, launch: Launch) -> Child:
        """Start the sandbox. Raises SandboxError subclasses; never runs the command
        unsandboxed."""

    def status(self, policy) -> BackendStatus:
        """Per capability and per network mode: what works here and why not."""


def check_network_mode(mode: str) -> None:
    """Raise NetworkModeUnsupported for a network mode (a Plan's ``network``) not built yet."""
    from ..checks import IMPLEMENTED_NETWORK_MODES
    if mode not in IMPLEMENTED_NETWORK_MODES:
        raise NetworkModeUnsupported(
            f"network mode {mode!r} is not built yet; use {' or '.join(map(repr, IMPLEMENTED_NETWORK_MODES))}",
            Reason.NETWORK_MODE_UNSUPPORTED)


def backend_down(name: str, reason: str, detail: str) -> BackendStatus:
    """The status of backend ``name`` when it cannot run here at all (not found, not
    importable, refused): every capability and network mode unavailable for ``reason``
    (a Reason value) with ``detail``."""
    caps = [CapabilityStatus(c, False, reason, detail) for c in ("user", "mount", "pid", "proc", "net", "loopback")]
    network = {m: CapabilityStatus(m, False, reason, detail) for m in ("deny", "allow", "proxy")}
    return BackendStatus(name, False, reason, detail, caps, network)
