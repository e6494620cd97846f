"""The console scripts' start and end (``pysandbox``, ``pybwrap``, and ``python -m`` of
both): what a short-lived command line's process can skip (issue 28).

:func:`start`, before the command line's imports: the cyclic garbage collector's first
threshold goes from 700 to 20,000 allocations. A start allocates ~12,000 container objects
and keeps most (modules, classes, functions); each young-generation collection on the way
walked them for nothing. The collector stays on: a long-running process (a proxy, a
terminal relay) still collects, every 20,000 allocations.

:func:`end`, after ``main`` returns: CPython's finalization clears every module and
collects what is left; for a command line that imported ~130 modules that is several
milliseconds of CPU, as much as a sixth of a whole ``pysandbox run -- true``
(benchmarks/README.md). :func:`end` flushes stdout and stderr and ends the process with
``os._exit`` only when the teardown has nothing to run: no ``atexit`` callback (logging's
shutdown, a ``weakref.finalize``, coverage's hooks all register one), no thread but the
main one, not in development mode (``-X dev`` reports unclosed resources at teardown), and
an exit status in 0..255. Otherwise, or when a flush fails, it returns the status and the
interpreter exits as usual. ``cli.main()`` and ``bwrap_compat.cli.main()`` themselves
always return.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

YOUNG_THRESHOLD = 20_000   # allocations between young-generation collections (CPython's default: 700)


def main():
    """The ``pysandbox`` console script and ``python -m pysandbox``: :func:`start`, then
    pysandbox.cli's ``main``, then :func:`end`."""
    start()
    from .cli import main as cli_main
    return end(cli_main())


def start() -> None:
    """Before a command line's imports: young-generation collections every
    :data:`YOUNG_THRESHOLD` allocations (the older generations' thresholds unchanged)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


def end(code):
    """``os._exit(code)`` after flushing stdio, when the interpreter's teardown has nothing
    to run; else ``code``, for ``sys.exit``."""
    if type(code) is not int or not 0 <= code <= 255 or sys.flags.dev_mode:
        return code
    pending = getattr(atexit, "_ncallbacks", None)
    if pending is None or pending() != 0:
        return code
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() != 1:
        return code
    try:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
    except Exception:   # a closed or broken stream: the usual exit reports it
        return code
    os._exit(code)
