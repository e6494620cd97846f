"""``pybwrap``: bubblewrap's command line, run on pysandbox's native backend.

Behaves as ``bwrap`` whatever name it is installed or linked under: messages are
prefixed ``bwrap: ``, a setup failure exits 1, the command's status is the exit
status (128+N for a signal). Start-up stays lean: ``--version`` and ``--help`` alone
import nothing of pysandbox, a ``--help`` after other options imports the parser but no
backend (tests/unit/test_startup_imports.py), and nothing here imports pyroute2 or hypothesis.

``PYBWRAP_BACKEND`` (``native`` by default, or ``bwrap``) picks the pysandbox
backend; ``bwrap`` exists only to smoke-test this layer where native cannot run.
"""

from __future__ import annotations

import os
import sys

from .messages import BWRAP_SETNS_WORDING, BWRAP_WORDING, OVERLAP, bwrap_message  # noqa: F401  (re-exported)

# --version: bwrap's own first line, unchanged (tools parse ``bubblewrap 0.X.Y`` off it),
# then what this is. PYBWRAP_VERSION is pysandbox's version (a unit test keeps them equal;
# no import here: --version stays lean).
BWRAP_VERSION = "bubblewrap 0.11.0"
PYBWRAP_VERSION = "0.1.0"
VERSION = f"{BWRAP_VERSION}\npybwrap {PYBWRAP_VERSION} (pysandbox: bwrap's command line on the native backend)"
LOG_ERR, LOG_WARNING = 3, 4


class _Out:
    level_prefix = False

    @classmethod
    def msg(cls, level: int, text: str) -> None:
        prefix = f"<{level}>" if cls.level_prefix else ""
        line = f"{prefix}bwrap: {text}\n"
        sys.stderr.flush()
        out = getattr(sys.stderr, "buffer", None)
        if out is None:      # a text-only stderr (tests replace it): no bytes to give back
            sys.stderr.write(line)
        else:                # a path's non-UTF-8 bytes as bwrap prints them, not as \udcXX
            out.write(os.fsencode(line))
            out.flush()


def die(text: str) -> int:
    _Out.msg(LOG_ERR, text)
    return 1


def usage(code: int, out) -> int:
    from .help import usage_text
    prog = sys.argv[0] if sys.argv and sys.argv[0] and not sys.argv[0].endswith("__main__.py") else "bwrap"
    out.write(usage_text(prog))
    out.flush()
    return code


def main(argv=None) -> int:
    """Run bwrap's command line ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Without ``argv`` this is the pybwrap process itself: ``--die-with-parent`` then also
    binds this process to its parent, as bwrap's own (:mod:`bwrap_compat.lifeline`).

    Raises:
        nothing: every failure is a ``bwrap: `` message and exit status 1, as bwrap.
    """
    parent_pid = os.getppid() if argv is None else None   # first: the lifeline's race check
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--help"]:   # what bwrap's parser does first with it; clients call it before every command
        return usage(0, sys.stdout)
    if argv == ["--version"]:
        print(VERSION, flush=True)
        return 0
    from pysandbox.errors import BwrapArgumentError, SandboxError
    from .checks import check
    from .parser import parse
    try:
        args = parse(argv)
    except BwrapArgumentError as exc:
        _Out.level_prefix = getattr(exc, "level_prefix", False)
        for warning in getattr(exc, "warnings", ()):
            _Out.msg(LOG_WARNING, warning)
        if getattr(exc, "usage", False):
            return usage(1, sys.stderr)
        return die(exc.args[0])
    _Out.level_prefix = args.level_prefix
    for warning in args.warnings:
        _Out.msg(LOG_WARNING, warning)
    if args.action == "help":
        return usage(0, sys.stdout)
    if args.action == "version":
        print(VERSION, flush=True)
        return 0
    try:
        check(args)
    except BwrapArgumentError as exc:
        if getattr(exc, "usage", False):
            return usage(1, sys.stderr)
        return die(exc.args[0])
    from .launch import run
    try:
        return run(args, backend=os.environ.get("PYBWRAP_BACKEND", "native"), parent_pid=parent_pid)
    except SandboxError as exc:
        return die(bwrap_message(exc))
    except OSError as exc:   # from our own descriptor handling
        return die(f"{exc.strerror or exc}")


def console_main() -> int:
    """The ``pybwrap`` console script and ``python -m bwrap_compat``: :func:`main` between
    pysandbox/console.py's start (before the heavy imports, which main makes) and end."""
    from pysandbox.console import end, start
    start()
    return end(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
