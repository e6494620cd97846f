"""The command line's resource limits (pysandbox/limits.py): the ``--limit-*`` options of
``pysandbox run``, merged over a profile's ``[limits]`` table (an option given replaces
the profile's value), and the stderr line naming the limit that ended the command."""

from __future__ import annotations

import sys

# option suffix -> (Limits field, metavar, help)
OPTIONS = (
    ("memory", "memory", "SIZE", "memory of the whole sandbox, e.g. 512M (a cgroup; fails closed with "
                                 "controller_not_delegated or cgroup_unavailable where none can be made)"),
    ("pids", "pids", "N", "processes and threads of the whole sandbox (a cgroup, as --limit-memory)"),
    ("cpu", "cpu_time", "SECONDS", "CPU seconds per process (RLIMIT_CPU: SIGXCPU, SIGKILL a second later)"),
    ("wall", "wall_time", "SECONDS", "the sandbox is killed after SECONDS (reported as a limit, unlike "
                                     "--timeout's SIGTERM)"),
    ("file-size", "file_size", "SIZE", "largest file a process may write (RLIMIT_FSIZE: SIGXFSZ)"),
    ("open-files", "open_files", "N", "descriptors per process (RLIMIT_NOFILE)"),
)
# Limits field -> its option, for error lines (cli_errors.OPTION_OF)
OPTION_OF = {field: f"--limit-{suffix}" for suffix, field, _m, _h in OPTIONS}


def add_arguments(parser) -> None:
    group = parser.add_argument_group("resource limits", "core dumps are off whenever a limit is set; "
                                      "the limit that ends the command is named on stderr "
                                      "(pysandbox: limit: ...)")
    for suffix, field, metavar, text in OPTIONS:
        group.add_argument(f"--limit-{suffix}", dest=f"limit_{field}", metavar=metavar, help=text)


def _number(field: str, text: str):
    """The option's text as Limits takes it: sizes as given, counts as int, seconds as float."""
    if field in ("memory", "file_size"):
        return text
    from .errors import PolicyError, Reason
    try:
        return float(text) if field == "wall_time" else int(text)
    except ValueError:
        raise PolicyError(f"{field} must be a number: {text!r}", Reason.INVALID_VALUE, text, field=field) from None


def merged(profile_limits, args):
    """The Limits of the profile (or None) with the command line's options over it.

    Raises:
        PolicyError: a bad value (its ``field`` names the option).
    """
    from .limits import KINDS, Limits
    values = {k: getattr(profile_limits, k) for k in KINDS + ("open_files",)} if profile_limits else {}
    for _suffix, field, _m, _h in OPTIONS:
        given = getattr(args, f"limit_{field}", None)
        if given is not None:
            values[field] = _number(field, given)
    return Limits(**values) if values else None


def report(*procs) -> None:
    """``pysandbox: limit: memory 512M reached`` on stderr when a limit ended the command."""
    for proc in procs:
        kind = getattr(proc, "limit", None)
        if kind is not None:
            print(f"pysandbox: limit: {proc.policy.limits.describe(kind)} reached", file=sys.stderr, flush=True)
