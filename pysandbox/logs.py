"""The ``pysandbox`` logger, kept as a library keeps one: a :class:`logging.NullHandler`
on it, and nothing else. pysandbox never configures logging for its caller; with the
NullHandler, a record nobody asked for (a proxy refusal, the native-to-bwrap fallback)
no longer reaches the caller's stderr through logging's last-resort handler. A caller
that configured logging (``basicConfig``, a handler of its own) still gets every record,
and ``on_proxy_event=`` still gets every proxy event. The command line prints what a
person must see itself (:mod:`pysandbox.cli_proxy`, ``--verbose``).
"""

from __future__ import annotations

import logging

NAME = "pysandbox"


def logger(name: str = NAME) -> logging.Logger:
    """``name``'s logger (``pysandbox`` or below it), the NullHandler on ``pysandbox`` first."""
    top = logging.getLogger(NAME)
    if not any(type(h) is logging.NullHandler for h in top.handlers):
        top.addHandler(logging.NullHandler())
    return logging.getLogger(name)
