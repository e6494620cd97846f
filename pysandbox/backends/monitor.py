"""The launcher's lifetime monitor of an ``as_pid_1`` sandbox: the Python half, shared by
both backends (the process itself is ``native/psb_monitor.h``).

With ``as_pid_1`` no init of ours is pid 1: the command is, and it may clear its own
PR_SET_PDEATHSIG. So every as_pid_1 launch gets a monitor: a small process on the host,
outside every namespace of the sandbox (the command can neither see, signal nor ptrace
it), holding a pidfd of pid 1 (opened while pid 1 could not yet have been reaped: the
native launcher's own child, or bwrap's child checked to be bwrap's), the read end of a
lifeline pipe whose write end only the launcher holds, and a pidfd of the launcher.
When the lifeline ends or the launcher's process is gone, the monitor SIGKILLs pid 1
through its pidfd (the whole pid namespace ends) and exits; when pid 1 exits, so does
the monitor. The command runs only once the monitor exists (native: the child's gate,
``psb_wait_gate``; bwrap: our init's ``-w``), so no launcher death leaves it unwatched.
The monitor is the launcher's child: :meth:`Monitor.end` closes the lifeline and
reaps it when the sandbox is done.

What it does not cover: a process of the launcher's own uid on the host can kill the
monitor (then the launcher's death no longer ends an as_pid_1 command that cleared its
PR_SET_PDEATHSIG); that process is outside the sandbox and could kill the launcher or
ptrace it as well, so it is outside the threat model (THREAT_MODEL.md).

Without pidfds (Linux < 5.3) there is no monitor: as_pid_1 launches fail closed
(``lifetime_monitor_unavailable``) and ``status`` says so (``as_pid_1_lifetime``).
"""

from __future__ import annotations

import errno
import os

from ..errors import CapabilityUnavailable, Reason, SetupError
from ..records import dataclass

# status info "as_pid_1_lifetime" when the monitor can run here
LIFETIME = "monitor"

# Tests only (tests/security/test_lifetime.py): a launcher process sets this on itself to
# launch as_pid_1 sandboxes without a monitor, the live control that shows the leak the
# monitor closes. Not an option: nothing outside the launcher's own code reaches it.
_test_disabled = False

_pidfd_error: str | None | bool = False   # False: not probed yet; None: pidfds work


def unavailable() -> str | None:
    """Why no monitor can run here (this kernel has no pidfd_open), or None. Probed
    once per process."""
    global _pidfd_error
    if _pidfd_error is False:
        try:
            os.close(os.pidfd_open(os.getpid()))
            _pidfd_error = None
        except AttributeError:
            _pidfd_error = "this Python has no os.pidfd_open"
        except OSError as exc:
            _pidfd_error = f"pidfd_open: {os.strerror(exc.errno) if exc.errno else exc} (Linux < 5.3)"
    return _pidfd_error if isinstance(_pidfd_error, str) else None


def lifetime() -> str:
    """The status info ``as_pid_1_lifetime``: ``"monitor"``, or why as_pid_1 launches
    fail closed here."""
    why = unavailable()
    return LIFETIME if why is None else f"unavailable: {why}; as_pid_1 launches fail closed"


def wanted(plan) -> bool:
    """Whether a launch of ``plan`` gets a monitor (every as_pid_1 launch).

    Raises:
        CapabilityUnavailable (lifetime_monitor_unavailable): the plan needs one and this
            host cannot run it; the command does not run.
    """
    if not plan.as_pid_1 or _test_disabled:
        return False
    why = unavailable()
    if why is not None:
        raise CapabilityUnavailable(f"as_pid_1: the command is pid 1 and may clear its own PR_SET_PDEATHSIG, and "
                                    f"the monitor that ends it with its launcher needs pidfds ({why}); the "
                                    f"command did not run. Drop as_pid_1 (an init of ours is pid 1)",
                                    Reason.LIFETIME_MONITOR_UNAVAILABLE)
    return True


def start_error(err: int) -> SetupError | CapabilityUnavailable:
    """The typed error of a monitor that could not be started (``err``: an errno)."""
    if err == errno.ENOSYS:
        return CapabilityUnavailable(f"the as_pid_1 lifetime monitor: pidfd_open: {os.strerror(err)}; the command "
                                     f"did not run", Reason.LIFETIME_MONITOR_UNAVAILABLE)
    return SetupError(f"the as_pid_1 lifetime monitor could not be started: {os.strerror(err)}; the command did "
                      f"not run", Reason.SETUP_FAILED, stage="lifetime monitor", errno=err)


@dataclass
class Monitor:
    """A running monitor: ``pid`` (our child) and ``fd``, the lifeline's write end."""

    pid: int
    fd: int

    def end(self) -> None:
        """The sandbox is done (or abandoned): close the lifeline (the monitor SIGKILLs
        whatever is left of pid 1 and exits) and reap the monitor. Idempotent."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
        pid, self.pid = self.pid, -1
        if pid > 0:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass   # reaped by someone else's waitpid(-1)


def start(pid1_fd: int) -> Monitor:
    """Start the monitor of the sandbox whose pid 1 the pidfd ``pid1_fd`` names (the bwrap
    backend; the native one starts it inside psb_spawn, between the clone and the
    child's gate). The caller keeps ``pid1_fd``; the monitor has its own copy.

    Raises:
        CapabilityUnavailable (lifetime_monitor_unavailable), SetupError: as
            :func:`start_error`.
    """
    from ._native_lib import load_module, init_fd
    ffi, lib = load_module()
    out = ffi.new("int *")
    pid = lib.psb_monitor_start(pid1_fd, init_fd(), out)
    if pid < 0:
        raise start_error(-pid)
    return Monitor(pid, out[0])
