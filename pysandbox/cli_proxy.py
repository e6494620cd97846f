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
    its warnings, the proxy's records left out (the summary line tells them)."""
    import logging
    from .logs import logger
    log = logger()
    if verbose:
        logging.basicConfig(format="%(message)s", level=logging.WARNING)
        log.setLevel(logging.DEBUG)   # the pysandbox logger only, not every library's
        return
    for old in [h for h in log.handlers if getattr(h, "_pysandbox_cli", False)]:
        log.removeHandler(old)   # main() called again in one process (tests): one handler
    handler = logging.StreamHandler()   # sys.stderr as it is at each record
    handler._pysandbox_cli = True
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.WARNING)
    handler.addFilter(lambda record: not record.name.startswith("pysandbox.proxy"))
    log.addHandler(handler)


def summary(egress) -> str | None:
    """``pysandbox: proxy refused 3 connections: example.com:443 (not_allowed), ...`` for
    an :class:`pysandbox.egress.Egress` that refused any, else None. Host names come from
    the sandbox: they are printable ASCII already (the proxy escapes them) and escaped
    again here."""
    from .proxy.events import REFUSED, printable
    refused = egress.counts.get("refused", 0) if egress is not None else 0
    if not refused:
        return None
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
