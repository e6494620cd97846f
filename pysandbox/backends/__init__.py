"""Backends and the choice between them.

``auto`` picks native where the native backend can run the plan here, else bwrap
where bwrap can, and logs the reason it passed native over. There is no silent
fallback from an explicit choice, and no fallback to running unsandboxed.

A launch may defer native's namespace probe (``select_backend(..., deferred=True)``):
native is then chosen without its throwaway clone and launches directly; only when that
launch fails before the command exists with a host-capability error does
:func:`after_failed_launch` run the full check, and its answer decides as before (auto:
bwrap with the same warning; an explicit native: the check's reason).
"""

from __future__ import annotations

import _thread

from ..errors import BackendUnavailable, CapabilityUnavailable, PolicyError, Reason
from ..trace import clock, debug_logger, ms
from .base import check_network_mode

BACKENDS = ("native", "bwrap")
_instances: dict = {}
_lock = _thread.allocate_lock()   # threading's own Lock; threading itself is not imported by a launch (issue 28)


def get_backend(name: str):
    """The backend instance called ``name`` (one per process)."""
    if name not in BACKENDS:
        raise PolicyError(f"backend must be auto, {' or '.join(BACKENDS)}: {name!r}", Reason.INVALID_VALUE, name)
    with _lock:
        backend = _instances.get(name)
        if backend is None:
            if name == "native":
                from .native import NativeBackend
                backend = _instances[name] = NativeBackend()
            else:
                from .bwrap import BwrapBackend
                backend = _instances[name] = BwrapBackend()
    return backend


def select_backend(name: str, plan, deferred: bool = False):
    """The backend that will run ``plan``, checked. Raises the typed reason when none can.

    ``deferred``: native is checked without its namespace probe (the module loaded and
    the plan translated only); the caller then owes :func:`after_failed_launch` any
    error of its launch. Logs the choice and each check's time to the ``pysandbox``
    logger at DEBUG (``pysandbox --verbose``)."""
    check_network_mode(plan.network)
    if name != "auto":
        backend = get_backend(name)
        _checked(backend, plan, f"backend {name} (asked for)", deferred)
        return backend
    try:
        backend = get_backend("native")
        _checked(backend, plan, "backend auto: native", deferred)
        return backend
    except (BackendUnavailable, CapabilityUnavailable) as native_error:
        return _fallback(plan, native_error)


def after_failed_launch(name: str, backend, plan, error: BaseException):
    """The backend to launch ``plan`` with after ``backend`` (chosen by
    ``select_backend(name, plan, deferred=True)``) failed with ``error``, or raises.

    Only a native launch that failed before its command existed (``error.before_command``,
    set by the native backend on a setup failure record or a failed clone) with a host
    capability error (BackendUnavailable, CapabilityUnavailable) is looked at again: the
    full check then runs, and what it raises is handled as ``select_backend`` handles it
    (auto: bwrap, checked, with the same warning; an explicit native: the check's
    error). When the check passes, the host can create the namespaces: ``error`` is the
    plan's own failure and is raised as it came."""
    if (backend.name != "native" or not getattr(error, "before_command", False)
            or not isinstance(error, (BackendUnavailable, CapabilityUnavailable))):
        raise error
    try:
        _checked(backend, plan, f"backend {name}: native, after its launch failed ({error.reason.value})")
    except (BackendUnavailable, CapabilityUnavailable) as native_error:
        if name != "auto":
            raise
        return _fallback(plan, native_error)
    raise error


def _fallback(plan, native_error):
    """auto, native unavailable: bwrap, checked, with the warning; else native's error."""
    try:
        backend = get_backend("bwrap")
        _checked(backend, plan, "backend auto: bwrap")
    except (BackendUnavailable, CapabilityUnavailable):
        raise native_error from None
    from ..logs import logger   # here: a launch that logs nothing imports nothing for it
    logger().warning("pysandbox: native backend unavailable (%s); using bwrap", native_error.reason.value)
    return backend


def _checked(backend, plan, what: str, deferred: bool = False) -> None:
    """``backend.check(plan)`` (``deferred``: ``check(plan, probe=False)`` where the
    backend has the option: native), logged with its time when someone listens (trace.py)."""
    options = {"probe": False} if deferred and backend.name == "native" else {}
    log = debug_logger()
    if log is None:
        backend.check(plan, **options)
        return
    started = clock()
    try:
        backend.check(plan, **options)
    except Exception as exc:
        log.debug("%s: unavailable after %.1f ms: %s", what, ms(started),
                  getattr(getattr(exc, "reason", None), "value", type(exc).__name__))
        raise
    log.debug("%s: checked in %.1f ms%s", what, ms(started),
              " (its namespace probe left to the launch)" if options else "")
