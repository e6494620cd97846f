"""The common command line ``pysandbox run -- CMD ...`` read without argparse.

argparse (with gettext and locale) and the parser's forty options cost about a third of
the interpreter's own start-up (issue 28). A command line that is exactly ``run``, ``--``
and a command names no option, so its namespace is argparse's defaults with the command:
:func:`run_args` returns that namespace, anything else (an option, ``--help``, no ``--``)
returns None and goes through the parser (cli_parser.py). tests/unit/test_cli_fast.py
checks the namespace against argparse's own for the same argv, so an option added to the
parser without its default here fails there.
"""

from __future__ import annotations

import sys

from .records import TYPE_CHECKING

if TYPE_CHECKING:
    from types import SimpleNamespace
else:
    SimpleNamespace = type(sys.implementation)   # types.SimpleNamespace, as types.py itself defines it (issue 28)


def run_args(argv: list[str]) -> SimpleNamespace | None:
    """argparse's namespace for ``["run", "--", CMD, ...]``, else None (use the parser)."""
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        return None
    return SimpleNamespace(
        verbose=False, cmd="run", profile=None, backend=None, network=None, allow_host=[],
        hide_credentials=True, protect_git=True, workdir=None, no_workdir=False, rw=[],
        allow_broad_writable=False, follow_writable_symlinks=False, ro=[], hide=[], tmpfs=[],
        home=None, home_file=[], chdir=None, setenv=[], unsetenv=[], clearenv=False, keep_env=None,
        tty=None, share_session=False, keep_authority_sockets=False, strict_unix=False,
        allow_io_uring=False, allow_syscall=[], report_denials=False, pass_fd=[], timeout=None,
        limit_memory=None, limit_pids=None, limit_cpu_time=None, limit_wall_time=None,
        limit_file_size=None, limit_open_files=None, workspace=False, commit=False, discard=False,
        allow_git=False, command=list(argv[1:]))


class Deferred:
    """Stands in for the parser on the fast path: a usage error builds the real parser
    and reports through it, as the parsed path does."""

    def __init__(self, build):
        self._build = build

    def error(self, message: str):
        self._build().error(message)
