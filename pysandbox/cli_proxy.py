"""What ``pysandbox run`` tells a person about its logging and its proxy.

Without ``--verbose``, the ``pysandbox`` logger's warnings (the native-to-bwrap fallback)
go to stderr as their message alone, and the proxy's per-connection records do not: at
exit, one line sums up the refusals instead (:func:`report`), so a ``curl: (56) CONNECT
tunnel failed, response 403`` is followed by a line naming pysandbox, the hosts and the
reason codes (README "Network proxy"). ``--verbose``: every record, refusals as they
happen, and the summary line too. The library itself configures nothing
(:mod:`pysandbox.logs`).
"""

from __future__ import annotations

import sys

SHOWN = 5   # distinct refusals named in the summary line; the rest are counted


def setup_logging(verbose: bool) -> None:
    """The command line's logging: ``--verbose`` every ``pysandbox`` record at DEBUG; else
    its warnings, the proxy's records left out (:mod:`pysandbox.logs`; no import of
    :mod:`logging` until something logs)."""
    from . import logs
    if verbose:
        import logging
        logging.basicConfig(format="%(message)s", level=logging.WARNING)
        logs.logger().setLevel(logging.DEBUG)   # the pysandbox logger only, not every library's
        return
    logs.stderr_warnings = True
    if "logging" in sys.modules:
        logs.logger()   # loggers made before this call (an earlier main() in one process)


def summary(egress) -> str | None:
    """``pysandbox: proxy refused 3 connections: example.com:443 (not_allowed), ...`` for
    an :class:`pysandbox.egress.Egress` that refused any, else None. Host names come from
    the sandbox: they are printable ASCII already (the proxy escapes them) and escaped
    again here."""
    refused = egress.counts.get("refused", 0) if egress is not None else 0
    if not refused:
        return None
    from .proxy.events import REFUSED, printable
    seen: dict = {}
    for event in egress.events:
        if event.verdict == REFUSED:
            host = printable(event.host, 80)
            where = f"[{host}]:{event.port}" if ":" in host else f"{host}:{event.port}"
            key = f"{where} ({event.reason})"
            seen[key] = seen.get(key, 0) + 1
    named = [key if n == 1 else f"{key} x{n}" for key, n in list(seen.items())[:SHOWN]]
    if len(seen) > SHOWN:
        named.append(f"and {len(seen) - SHOWN} more")
    noun = "connection" if refused == 1 else "connections"
    return f"pysandbox: proxy refused {refused} {noun}: " + ", ".join(named)


def report(*procs) -> None:
    """The summary line on stderr for each finished sandbox whose proxy refused anything."""
    for proc in procs:
        line = summary(getattr(proc, "proxy", None))
        if line is not None:
            print(line, file=sys.stderr, flush=True)
