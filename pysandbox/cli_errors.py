"""The command line's error lines: a PolicyError naming the option the user gave
(``--chdir /missing: ...``) or the profile's file, line and key, and a setup error
without its internal plan step and native op (kept under ``--verbose``)."""

from __future__ import annotations

import os
import sys

from . import cli_limits
from .relpath import from_caller

PROG = "pysandbox"
# The exit statuses of `pysandbox run` besides the command's own (README, "Exit status")
EXIT_USAGE, EXIT_SETUP, EXIT_NOEXEC, EXIT_NOTFOUND = 2, 125, 126, 127
# Policy field (PolicyError.field) -> the option that sets it
OPTION_OF = {"allow_hosts": "--allow-host", "chdir": "--chdir", "workdir": "--workdir", "ro": "--ro", "rw": "--rw",
             "hide": "--hide", "tmpfs": "--tmpfs", "profile": "--profile", "allow_syscalls": "--allow-syscall",
             "home": "--home", "home_files": "--home-file",
             **cli_limits.OPTION_OF}
# patterns are compiled by `re` on first use (its cache), not when a launch imports the module
_STEP_DETAIL = r" \(((plan step \d+|plan rlimits \S+), )?(native op \d+|tail step) \w+\)"


def write_line(text: str) -> None:
    """``text`` and a newline on stderr, a path's bytes that are not UTF-8 written as those
    bytes (the surrogateescape form ``os.fsdecode`` gave them), as pybwrap and the shell
    echo them, instead of Python's ``\\udcff`` escapes."""
    sys.stderr.flush()
    buffer = getattr(sys.stderr, "buffer", None)
    if buffer is None:   # a text-only stream (a caller's redirect): its own error handler
        print(text, file=sys.stderr, flush=True)
        return
    buffer.write(text.encode(sys.stderr.encoding or "utf-8", "surrogateescape") + b"\n")
    buffer.flush()


def without_step(message: str) -> str:
    """A setup error's line without ``(plan step N, native op M KIND)`` or the setup
    tail's ``(plan step N, tail step KIND)`` (backends/tail.py)."""
    import re   # here: only a setup failure's message pays for it (issue 28)
    return re.sub(_STEP_DETAIL, "", message)


def describe(exc, args, profile=None) -> str:
    """A PolicyError's line, naming the option the user gave (``--chdir /missing: ...``)
    or the profile's file, line and key the value came from."""
    reason = exc.reason.value
    message = exc.args[0] if exc.args else ""
    if profile is not None and message.startswith(profile.path):
        return f"{reason}: {message}"    # already names the file and key
    field = exc.field
    value = exc.value
    if field is None and isinstance(value, str):   # a plan check: the option whose path it is
        field = next((name for name in ("tmpfs", "hide", "ro", "rw") for given in getattr(args, name, None) or ()
                      if given == value or _canon(given) == value), None)
    if field is None and isinstance(value, str) and not getattr(args, "no_workdir", False) and \
            value in (getattr(args, "workdir", None), _canon(getattr(args, "workdir", None) or os.getcwd())):
        field = "workdir"   # a writable-path check of the workdir (given, or the current directory)
    if profile is not None and not _given(args, field):
        key = profile.key_for(exc)
        if key is not None:
            return f"{reason}: {profile.where(key)}: {message}"
    if field == "chdir" and getattr(args, "chdir", None) is None:
        field = "workdir"    # the start directory was the workdir (given or the current directory)
    given = _given(args, field)
    option = OPTION_OF.get(field or "")
    if option is None:
        return f"{reason}: {message}"
    shown = value if isinstance(value, str) else None
    if isinstance(given, list):
        shown = next((g for g in given if value in (g, _canon(g), from_caller(g))), shown)
    elif isinstance(given, str):
        shown = given
    elif field == "workdir" and not getattr(args, "no_workdir", False):
        option = "the current directory (the default --workdir)"
    for prefix in (f"{exc.field} {value}: ", f"{field} {value}: "):
        if isinstance(value, str) and message.startswith(prefix):
            message = message[len(prefix):]
    return f"{reason}: {option}{' ' + shown if shown else ''}: {message}"


def _given(args, field):
    """What the command line gave for a Policy field: a list, a string or None."""
    if field in ("ro", "rw", "hide", "tmpfs"):
        return getattr(args, field, None) or None
    if field in ("chdir", "workdir", "home"):
        return getattr(args, field, None)
    if field == "home_files":
        return getattr(args, "home_file", None) or None
    return None


def _canon(path):
    try:
        return os.path.realpath(path)
    except (TypeError, ValueError):
        return path


def start_failed(command, exc: OSError, say) -> int:
    """The exit status and line (through ``say``) for a command that did not start (a
    SandboxError is the caller's to report: raised again)."""
    from .errors import Reason, SandboxError
    if isinstance(exc, SandboxError):
        raise exc
    if isinstance(exc, FileNotFoundError):
        say(f"{command[0]}: command not found ({exc.strerror})")
        return EXIT_NOTFOUND
    if isinstance(exc, PermissionError):
        say(f"{command[0]}: not executable ({exc.strerror})")
        return EXIT_NOEXEC
    say(f"{Reason.SETUP_FAILED.value}: cannot start the sandbox: {exc}")
    return EXIT_SETUP
