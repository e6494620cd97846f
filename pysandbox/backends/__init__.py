"""Backends and the choice between them.

``auto`` picks native where the native backend can run the plan here, else bwrap
where bwrap can, and logs the reason it passed native over. There is no silent
fallback from an explicit choice, and no fallback to running unsandboxed.
"""

from __future__ import annotations

import threading

from ..errors import BackendUnavailable, CapabilityUnavailable, PolicyError, Reason
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
                from .native import NativeBackend as cls
            else:
                from .bwrap import BwrapBackend as cls
            backend = _instances[name] = cls()
    return backend


def select_backend(name: str, plan):
    """The backend that will run ``plan``, checked. Raises the typed reason when none can."""
    check_network_mode(plan.network)
    if name != "auto":
        backend = get_backend(name)
        backend.check(plan)
        return backend
    try:
        backend = get_backend("native")
        backend.check(plan)
        return backend
    except (BackendUnavailable, CapabilityUnavailable) as native_error:
        try:
            backend = get_backend("bwrap")
            backend.check(plan)
        except (BackendUnavailable, CapabilityUnavailable):
            raise native_error from None
        import logging   # here: a launch that logs nothing imports nothing for it
        logging.getLogger("pysandbox").warning("pysandbox: native backend unavailable (%s); using bwrap", native_error.reason.value)
        return backend
