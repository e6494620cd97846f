"""Backends and the choice between them.

``auto`` picks native where the native backend can run the plan here, else bwrap
where bwrap can, and logs the reason it passed native over. There is no silent
fallback from an explicit choice, and no fallback to running unsandboxed.
"""

from __future__ import annotations

import threading

from ..errors import BackendUnavailable, CapabilityUnavailable, PolicyError, Reason
from ..trace import clock, debug_logger, ms
from .base import check_network_mode

BACKENDS = ("native", "bwrap")
_instances: dict = {}
_lock = threading.Lock()


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


def select_backend(name: str, plan):
    """The backend that will run ``plan``, checked. Raises the typed reason when none can.

    Logs the choice and each check's time to the ``pysandbox`` logger at DEBUG
    (``pysandbox --verbose``)."""
    check_network_mode(plan.network)
    if name != "auto":
        backend = get_backend(name)
        _checked(backend, plan, f"backend {name} (asked for)")
        return backend
    try:
        backend = get_backend("native")
        _checked(backend, plan, "backend auto: native")
        return backend
    except (BackendUnavailable, CapabilityUnavailable) as native_error:
        try:
            backend = get_backend("bwrap")
            _checked(backend, plan, "backend auto: bwrap")
        except (BackendUnavailable, CapabilityUnavailable):
            raise native_error from None
        from ..logs import logger   # here: a launch that logs nothing imports nothing for it
        logger().warning("pysandbox: native backend unavailable (%s); using bwrap", native_error.reason.value)
        return backend


def _checked(backend, plan, what: str) -> None:
    """``backend.check(plan)``, logged with its time when someone listens (trace.py)."""
    log = debug_logger()
    if log is None:
        backend.check(plan)
        return
    started = clock()
    try:
        backend.check(plan)
    except Exception as exc:
        log.debug("%s: unavailable after %.1f ms: %s", what, ms(started),
                  getattr(getattr(exc, "reason", None), "value", type(exc).__name__))
        raise
    log.debug("%s: checked in %.1f ms", what, ms(started))
