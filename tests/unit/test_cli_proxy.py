"""The command line's proxy summary line and logging (pysandbox/cli_proxy.py, issue 31
item 3) and the library's NullHandler (pysandbox/logs.py)."""

from __future__ import annotations

import logging
import subprocess
import sys

from pysandbox import cli_proxy
from pysandbox.proxy.events import ProxyEvent


class _Egress:
    def __init__(self, events):
        self.events = events
        self.counts = {"allowed": sum(e.verdict == "allowed" for e in events),
                       "refused": sum(e.verdict == "refused" for e in events)}


def _event(host, port=443, verdict="refused", reason="not_allowed"):
    return ProxyEvent(0.0, host, port, verdict, reason, "connect")


def test_summary_names_each_refusal_once_with_its_count():
    events = [_event("example.com"), _event("example.com"), _event("pypi.org", verdict="allowed", reason="ok"),
              _event("10.0.0.1", 80, reason="ip_literal_not_listed"), _event("::1", 22, reason="special_address")]
    assert cli_proxy.summary(_Egress(events)) == (
        "pysandbox: proxy refused 4 connections: example.com:443 (not_allowed) x2, "
        "10.0.0.1:80 (ip_literal_not_listed), [::1]:22 (special_address)")
    assert cli_proxy.summary(_Egress([_event("pypi.org", verdict="allowed", reason="ok")])) is None   # control
    assert cli_proxy.summary(None) is None


def test_summary_is_bounded_and_escapes_what_the_sandbox_named():
    events = [_event(f"h{i}.test") for i in range(50)] + [_event("evil\x1b[2J.test")]
    line = cli_proxy.summary(_Egress(events))
    assert line.startswith("pysandbox: proxy refused 51 connections: h0.test:443 (not_allowed), ")
    assert line.endswith(f", and {51 - cli_proxy.SHOWN} more") and "\x1b" not in line
    assert len(line) < 400


def test_import_pysandbox_and_a_launch_leave_the_root_logger_alone():
    code = ("import logging, pysandbox.proxy.events, pysandbox.logs as L; L.logger()\n"
            "top = logging.getLogger('pysandbox')\n"
            "print(logging.getLogger().handlers, [type(h).__name__ for h in top.handlers])\n"
            "logging.getLogger('pysandbox.proxy').warning('proxy refused x')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[] ['NullHandler']" and done.stderr == "", done
    # control: without the NullHandler the same warning reaches stderr through the last resort
    bare = subprocess.run([sys.executable, "-c", "import logging; logging.getLogger('pysandbox.proxy')"
                           ".warning('proxy refused x')"], capture_output=True, text=True, timeout=60)
    assert bare.stderr == "proxy refused x\n"


def test_cli_logging_shows_warnings_but_not_proxy_records(monkeypatch):
    from pysandbox import logs
    log = logging.getLogger("pysandbox")
    before = list(log.handlers)
    monkeypatch.setattr(logs, "stderr_warnings", False)
    try:
        cli_proxy.setup_logging(False)
        cli_proxy.setup_logging(False)   # twice in one process: one handler
        logs.logger("pysandbox.proxy")
        assert sum(getattr(h, "_pysandbox_cli", False) for h in log.handlers) == 1
        handler = next(h for h in log.handlers if getattr(h, "_pysandbox_cli", False))
        shown = logging.LogRecord("pysandbox", logging.WARNING, __file__, 1, "native unavailable", (), None)
        proxy = logging.LogRecord("pysandbox.proxy", logging.WARNING, __file__, 1, "proxy refused", (), None)
        assert handler.filter(shown) and not handler.filter(proxy)
    finally:
        log.handlers[:] = before


def test_cli_fallback_warning_still_reaches_stderr():
    """The native-to-bwrap fallback warning (backends/__init__.py) reached a CLI user's
    stderr through the last resort; with the library's NullHandler the CLI shows it."""
    code = ("import logging, sys\nfrom pysandbox import cli_proxy, logs\ncli_proxy.setup_logging(False)\n"
            "logs.logger().warning('pysandbox: native backend unavailable (x); using bwrap')\n"
            "logs.logger('pysandbox.proxy').warning('proxy refused connect a:1')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr == "pysandbox: native backend unavailable (x); using bwrap\n", done
