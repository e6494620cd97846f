"""How the console scripts (``pysandbox``, ``pybwrap``) end: without the interpreter's
teardown when nothing is left for it to do.

After ``main`` returns, CPython's finalization clears every module and collects what is
left: for a command line that imported ~130 modules that is several milliseconds of CPU,
as much as a sixth of a whole ``pysandbox run -- true`` (issue 28, benchmarks/README.md).
:func:`end` flushes stdout and stderr and ends the process with ``os._exit`` only when the
teardown has nothing to run: no ``atexit`` callback (logging's shutdown, a
``weakref.finalize``, coverage's hooks all register one), no thread but the main one, not
in development mode (``-X dev`` reports unclosed resources at teardown), and an exit
status in 0..255. Otherwise, or when a flush fails, it returns the status and the
interpreter exits as usual. Only the console-script entry points and ``python -m`` call
it; ``main()`` itself always returns.
"""

from __future__ import annotations

import atexit
import os
import sys


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
