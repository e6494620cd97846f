"""pysandbox: run commands confined in Linux namespaces.

    import pysandbox
    policy = pysandbox.Policy.default(workdir=".", network="deny")
    done = pysandbox.run(["make", "test"], policy=policy, capture_output=True, timeout=60)

See README.md for the command line, the reason codes and what is not covered.

Every public name is imported on first use (PEP 562 ``__getattr__``), so that ``import
pysandbox`` and the command lines' ``--help`` and ``--version`` stay cheap: ``from pysandbox
import Policy`` imports the policy modules, not the backends (docs/ARCHITECTURE.md).
"""

import sys as _sys
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType as _ModuleType
else:
    _ModuleType = type(_sys)   # types.ModuleType, as types.py itself defines it (a launch need not import types)
del TYPE_CHECKING

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable", "Bind", "BwrapArgumentError", "BwrapNotFound", "BwrapOptionUnsupported",
    "BwrapProbeFailed", "CalledProcessError", "CapabilityUnavailable", "Chmod", "CompletedProcess",
    "DEVNULL", "Dev", "Dir", "Env", "File", "Hide", "LimitUnavailable", "Limits", "Mqueue", "NativeModuleMissing", "Network",
    "NetworkModeUnsupported", "NetworkNamespaceUnavailable", "Overlay", "PIPE", "Policy", "PolicyError", "Popen",
    "Pool", "Proc", "Reason", "Sandbox", "SessionError", "SessionProcess", "RemountRo", "STDOUT", "SandboxError", "SandboxProcess", "SetuidRejected",
    "SetupError", "Symlink", "TimeoutExpired", "Tmpfs", "UserNamespaceUnavailable", "Workspace", "WorkspaceConflict", "WorkspaceError", "call", "check_call",
    "check_output", "run", "status",
    "__version__",
]

# public name -> the submodule that defines it
_HOME = {
    **dict.fromkeys(("BackendUnavailable", "BwrapArgumentError", "BwrapNotFound", "BwrapOptionUnsupported",
                     "BwrapProbeFailed", "CapabilityUnavailable", "LimitUnavailable", "NativeModuleMissing",
                     "NetworkModeUnsupported", "NetworkNamespaceUnavailable", "PolicyError", "Reason", "SandboxError", "SetuidRejected",
                     "SessionError", "SetupError", "UserNamespaceUnavailable", "WorkspaceConflict",
                     "WorkspaceError"), "errors"),
    **dict.fromkeys(("Bind", "Chmod", "Dev", "Dir", "Env", "File", "Hide", "Mqueue", "Network", "Overlay",
                     "Policy", "Proc", "RemountRo", "Symlink", "Tmpfs"), "policy"),
    **dict.fromkeys(("DEVNULL", "PIPE", "STDOUT", "CalledProcessError", "CompletedProcess", "Popen",
                     "SandboxProcess", "TimeoutExpired", "call", "check_call", "check_output", "run"), "process"),
    "Limits": "limits", "status": "status", "Sandbox": "session", "SessionProcess": "session", "Pool": "pool",
    "Workspace": "workspace",
}
# the submodules `import pysandbox` used to import, still reachable as attributes
_SUBMODULES = frozenset(("_popen", "backends", "checks", "errors", "execpath", "fs", "lifecycle", "memfd", "ops",
                         "plan", "policy", "pool", "process", "seccomp", "session", "session_proto", "view"))

TYPE_CHECKING = False
if TYPE_CHECKING:   # what type checkers and IDEs read; at run time __getattr__ imports these
    from .errors import (BackendUnavailable, BwrapArgumentError, BwrapNotFound, BwrapOptionUnsupported,
                         BwrapProbeFailed, CapabilityUnavailable, LimitUnavailable, NativeModuleMissing,
                         NetworkModeUnsupported, NetworkNamespaceUnavailable, PolicyError, Reason, SandboxError,
                         SessionError, SetuidRejected, SetupError, UserNamespaceUnavailable, WorkspaceConflict,
                         WorkspaceError)
    from .limits import Limits
    from .policy import (Bind, Chmod, Dev, Dir, Env, File, Hide, Mqueue, Network, Overlay, Policy, Proc,
                         RemountRo, Symlink, Tmpfs)
    from .pool import Pool
    from .process import (DEVNULL, PIPE, STDOUT, CalledProcessError, CompletedProcess, Popen, SandboxProcess,
                          TimeoutExpired, call, check_call, check_output, run)
    from .session import Sandbox, SessionProcess
    from .status import status
    from .workspace import Workspace
del TYPE_CHECKING


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _submodule(name)   # which sets it as an attribute here
    home = _HOME.get(name)
    if home is None:   # `from . import cli_fast` asks here first: no import for it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_submodule(home), name)
    globals()[name] = value
    return value


def _submodule(name: str) -> _ModuleType:
    """``importlib.import_module("pysandbox." + name)`` without importing importlib (and
    warnings) into every command line's start."""
    __import__(f"{__name__}.{name}")
    return _sys.modules[f"{__name__}.{name}"]


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(_ModuleType):
    """This package's module type: the submodule ``pysandbox.status`` never takes the place
    of the function ``pysandbox.status`` (importing a submodule sets it as an attribute of
    its package; the submodule stays in ``sys.modules``)."""

    def __setattr__(self, name, value):
        if name == "status" and isinstance(value, type(_sys)):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
