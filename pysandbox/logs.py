"""The ``pysandbox`` logger, kept as a library keeps one: a :class:`logging.NullHandler`
on it, and nothing else. pysandbox never configures logging for its caller; with the
NullHandler, a record nobody asked for (a proxy refusal, the native-to-bwrap fallback)
no longer reaches the caller's stderr through logging's last-resort handler. A caller
that configured logging (``basicConfig``, a handler of its own) still gets every record,
and ``on_proxy_event=`` still gets every proxy event.

The command line is the one caller that asks for stderr (:mod:`pysandbox.cli_proxy`):
``stderr_warnings`` makes the first use of the logger add a handler for its warnings,
the proxy's per-connection records left out (the summary line tells them). Importing
this module imports nothing: a launch that logs nothing imports no :mod:`logging`.
"""

from __future__ import annotations

NAME = "pysandbox"
stderr_warnings = False   # set by the command line (without --verbose) before any launch


def logger(name: str = NAME):
    """``name``'s logger (``pysandbox`` or below it), the handlers on ``pysandbox`` first."""
    import logging
    top = logging.getLogger(NAME)
    if not any(type(h) is logging.NullHandler for h in top.handlers):
        top.addHandler(logging.NullHandler())
    if stderr_warnings and not any(getattr(h, "_pysandbox_cli", False) for h in top.handlers):
        handler = logging.StreamHandler()   # sys.stderr
        setattr(handler, "_pysandbox_cli", True)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.setLevel(logging.WARNING)
        handler.addFilter(lambda record: not record.name.startswith("pysandbox.proxy"))
        top.addHandler(handler)
    return logging.getLogger(name)
