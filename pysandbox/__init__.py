"""pysandbox: run commands confined in Linux namespaces.

    import pysandbox
    policy = pysandbox.Policy.default(workdir=".", network="deny")
    done = pysandbox.run(["make", "test"], policy=policy, capture_output=True, timeout=60)

See README.md for the command line, the reason codes and what is not covered.
"""

from .errors import (
    BackendUnavailable,
    BwrapArgumentError,
    BwrapNotFound,
    BwrapOptionUnsupported,
    BwrapProbeFailed,
    CapabilityUnavailable,
    NativeModuleMissing,
    NetworkModeUnsupported,
    NetworkNamespaceUnavailable,
    PolicyError,
    Reason,
    SandboxError,
    SetuidRejected,
    SessionError,
    SetupError,
    UserNamespaceUnavailable,
)
from .policy import (Bind, Chmod, Dev, Dir, Env, File, Hide, Mqueue, Network, Overlay, Policy, Proc, RemountRo,
                     Symlink, Tmpfs)
from .process import (
    DEVNULL,
    PIPE,
    STDOUT,
    CalledProcessError,
    CompletedProcess,
    Popen,
    SandboxProcess,
    TimeoutExpired,
    call,
    check_call,
    check_output,
    run,
)

# Imported eagerly: the submodule pysandbox.status and the function share the name, and
# a lazy __getattr__ loses to the submodule once anything imports pysandbox.status (then
# pysandbox.status is the module). status.py imports the probes only when called.
from .status import status
from .session import Sandbox, SessionProcess   # noqa: E402 - after process, which it builds on
from .pool import Pool   # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable", "Bind", "BwrapArgumentError", "BwrapNotFound", "BwrapOptionUnsupported",
    "BwrapProbeFailed", "CalledProcessError", "CapabilityUnavailable", "Chmod", "CompletedProcess",
    "DEVNULL", "Dev", "Dir", "Env", "File", "Hide", "Mqueue", "NativeModuleMissing", "Network",
    "NetworkModeUnsupported", "NetworkNamespaceUnavailable", "Overlay", "PIPE", "Policy", "PolicyError", "Popen",
    "Pool", "Proc", "Reason", "Sandbox", "SessionError", "SessionProcess", "RemountRo", "STDOUT", "SandboxError", "SandboxProcess", "SetuidRejected",
    "SetupError", "Symlink", "TimeoutExpired", "Tmpfs", "UserNamespaceUnavailable", "call", "check_call",
    "check_output", "run", "status",
    "__version__",
]
