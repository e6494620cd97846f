"""The debug records of a launch (``pysandbox --verbose``, the ``pysandbox`` logger at
DEBUG): the backend choice, the plan's steps, the phase timings.

Nothing is imported for them unless someone listens: :func:`debug_logger` answers from
``sys.modules`` (a program that enabled DEBUG has imported :mod:`logging`), so a launch
that logs nothing imports nothing for it (issue 15's start-up budget).
"""

from __future__ import annotations

import sys
from time import perf_counter as clock   # noqa: F401  (the timer the records use)

LOGGER = "pysandbox"


def debug_logger():
    """The ``pysandbox`` logger when it is enabled for DEBUG, else None (no import)."""
    logging = sys.modules.get("logging")
    if logging is None:
        return None
    log = logging.getLogger(LOGGER)
    return log if log.isEnabledFor(logging.DEBUG) else None


def ms(since: float) -> float:
    """Milliseconds from ``since`` (a :func:`clock` reading) to now."""
    return (clock() - since) * 1e3


def describe_op(op) -> str:
    """One plan step as one short line (byte strings by their size, defaults left out)."""
    import dataclasses   # only when a step is shown
    parts = []
    for f in dataclasses.fields(op):
        value = getattr(op, f.name)
        if value is None or value is False or value == () or value == f.default:
            continue
        if isinstance(value, (bytes, bytearray)):
            value = f"<{len(value)} bytes>"
        elif isinstance(value, frozenset):
            value = "{" + ",".join(sorted(map(str, value))) + "}"
        elif isinstance(value, int) and "mode" in f.name:
            value = oct(value)
        parts.append(f"{f.name}={value}")
    return f"{type(op).__name__}({', '.join(parts)})"
