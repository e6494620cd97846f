"""status(): can a policy run here, on which backend, and if not, why.

Per backend, per capability (user, mount, pid, proc, net namespaces, loopback) and
per network mode (deny, allow, proxy). Each answer comes from trying the operation
in a throwaway child; results are cached per process.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field

from .backends import BACKENDS, get_backend
from .backends.base import BackendStatus, backend_down
from .errors import PolicyError, Reason, SandboxError

__all__ = ["Status", "status"]

_cache: dict = {}
_lock = threading.Lock()
_ENV_KEYS = ("PATH", "PYSANDBOX_BWRAP", "PYSANDBOX_ALLOW_SETUID_BWRAP", "PYSANDBOX_NATIVE_NO_EXEC_INIT",
             "PYSANDBOX_CGROUP_ROOT")


@dataclass
class Status:
    """The answer of :func:`status`.

    ``backend`` is the backend ``auto`` would pick (or the one asked for); ``available``,
    ``reason`` and ``detail`` are about running the policy on it; ``backends`` holds
    every backend looked at; ``network`` is the chosen backend's answer per network mode.
    """

    available: bool
    backend: str
    reason: str | None = None
    detail: str = ""
    backends: dict = field(default_factory=dict)    # name -> BackendStatus
    network: dict = field(default_factory=dict)     # mode -> CapabilityStatus
    network_mode: str = "deny"
    host: dict = field(default_factory=dict)        # probe.host_capabilities(): userns, netns, sysctls
    # Unix-socket authority coverage (authority.coverage): what is masked, exactly
    authority: dict = field(default_factory=dict)
    # credential stores (credentials.coverage): what is hidden, what stays readable, the opt-out
    credentials: dict = field(default_factory=dict)
    # git metadata (gitmeta.coverage): the .git entries of the writable paths kept read-only
    git: dict = field(default_factory=dict)
    # resource limits (enforcement.host_limits): per limit, whether this launcher can
    # enforce it here, by what, or the reason it cannot
    limits: dict = field(default_factory=dict)
    # the built-in seccomp filter (seccomp.coverage): calls refused whole, and the opt-ins taken
    seccomp: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return dataclasses.asdict(self)


def status(policy=None, *, backend: str = "auto") -> Status:
    """Whether ``policy`` (default: ``Policy.default()``) can run here, and why not.

    ``backend="auto"`` looks at every backend and reports the one a launch would pick
    (native first, then bwrap, as ``select_backend``); naming a backend looks only at it.

    Raises:
        PolicyError: an unknown backend name or a policy that does not compile.
    """
    from .policy import Policy
    if backend != "auto" and backend not in BACKENDS:
        raise PolicyError(f"backend must be auto, {' or '.join(BACKENDS)}: {backend!r}",
                          Reason.INVALID_VALUE, backend)
    if policy is None:
        policy = Policy.default()
    elif not isinstance(policy, Policy):
        raise PolicyError("status needs a Policy", Reason.INVALID_VALUE, policy)
    key = (policy, backend, tuple(os.environ.get(k) for k in _ENV_KEYS))
    with _lock:
        got = _cache.get(key)
    if got is not None:
        return got
    names = BACKENDS if backend == "auto" else (backend,)
    backends = {name: _backend_status(name, policy) for name in names}
    if backend == "auto":
        chosen = next((n for n in BACKENDS if backends[n].available), BACKENDS[0])
    else:
        chosen = backend
    picked = backends[chosen]
    from . import authority, credentials, gitmeta, probe, seccomp
    from .enforcement import host_limits
    host = probe.host_capabilities()
    limits = host_limits()
    available, reason, detail = picked.available, picked.reason, picked.detail
    wanted = policy.limits.cgroup if policy.limits is not None else {}
    missing = next((k for k in wanted if not limits[k]["available"]), None)
    if available and missing is not None:   # the policy's own limit cannot be enforced: it would fail closed
        available, reason, detail = False, limits[missing]["reason"], limits[missing]["detail"]
    result = Status(available, chosen, reason, detail, backends,
                    dict(picked.network), policy.network.mode,
                    host={"userns": host.userns, "netns": host.netns, **host.detail},
                    authority=authority.coverage(policy), limits=limits, seccomp=seccomp.coverage(policy),
                    credentials=credentials.coverage(policy), git=gitmeta.coverage(policy))
    with _lock:
        _cache[key] = result
    return result


def _backend_status(name: str, policy) -> BackendStatus:
    try:
        impl = get_backend(name)
    except ImportError as exc:
        reason = Reason.NATIVE_MODULE_MISSING if name == "native" else Reason.SETUP_FAILED
        return backend_down(name, reason.value, f"the {name} backend cannot be imported: {exc}")
    try:
        return impl.status(policy)
    except PolicyError:
        raise
    except SandboxError as exc:
        return backend_down(name, exc.reason.value, exc.args[0] if exc.args else str(exc))
    except NotImplementedError as exc:
        return backend_down(name, Reason.SETUP_FAILED.value, f"the {name} backend has no status yet: {exc}")


def clear_cache() -> None:
    """Forget cached answers (tests that change the host or the environment)."""
    from . import probe
    with _lock:
        _cache.clear()
    probe.clear_caches()
