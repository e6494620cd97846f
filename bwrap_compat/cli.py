"""``pybwrap``: bubblewrap's command line, run on pysandbox's native backend.

Behaves as ``bwrap`` whatever name it is installed or linked under: messages are
prefixed ``bwrap: ``, a setup failure exits 1, the command's status is the exit
status (128+N for a signal). Start-up stays lean: ``--version`` imports nothing
but this module, and nothing here imports pyroute2 or hypothesis.

``PYBWRAP_BACKEND`` (``native`` by default, or ``bwrap``) picks the pysandbox
backend; ``bwrap`` exists only to smoke-test this layer where native cannot run.
"""

from __future__ import annotations

import errno
import os
import sys

VERSION = "bubblewrap 0.11.0"
LOG_ERR, LOG_WARNING = 3, 4


class _Out:
    level_prefix = False

    @classmethod
    def msg(cls, level: int, text: str) -> None:
        prefix = f"<{level}>" if cls.level_prefix else ""
        sys.stderr.write(f"{prefix}bwrap: {text}\n")
        sys.stderr.flush()


def die(text: str) -> int:
    _Out.msg(LOG_ERR, text)
    return 1


def usage(code: int, out) -> int:
    from .help import usage_text
    prog = sys.argv[0] if sys.argv and sys.argv[0] and not sys.argv[0].endswith("__main__.py") else "bwrap"
    out.write(usage_text(prog))
    out.flush()
    return code


# bwrap's wording for a failed setup step, by pysandbox's stage name.
BWRAP_WORDING = {
    "chdir": "Can't chdir to {}", "tmpfs": "Can't mount tmpfs on {}", "proc": "Can't mount proc on {}",
    "mqueue": "Can't mount mqueue on {}", "dir": "Can't mkdir {}", "symlink": "Can't make symlink at {}",
    "file": "Can't create file at {}", "remount_ro": "Can't remount readonly on {}", "chmod": "Can't chmod {}",
    "hostname": "Can't set hostname to {}", "bind": "Can't bind mount {}",
}
# Steps that name a descriptor, not a path: bwrap's words without one.
BWRAP_SETNS_WORDING = {"join_userns": "Joining specified user namespace failed", "join_pidns": "Setting pidns failed",
                       "userns2": "Setting userns2 failed"}


def bwrap_message(exc) -> str:
    """A pysandbox error as bwrap would word it (``Can't mount tmpfs on /x: Permission denied``)."""
    stage, err, name = getattr(exc, "stage", None), getattr(exc, "errno", None), getattr(exc, "filename", None)
    if stage == "join_userns" and err == errno.EINVAL:
        return ("Joining the specified user namespace failed, it might not be a descendant of the current "
                "user namespace.")
    if stage == "overlay" and err and name:
        detail = "Overlay directories may not overlap" if err == errno.ELOOP else os.strerror(err)
        # bwrap names the mount point in its setup view (/newroot/DEST), as the executor does.
        where = "/newroot" + (name if name != "/" else "")
        return f"Can't make overlay mount on {where} with options {getattr(exc, 'mount_options', '?')}: {detail}"
    if stage in BWRAP_SETNS_WORDING and err:
        return f"{BWRAP_SETNS_WORDING[stage]}: {os.strerror(err)}"
    if stage in BWRAP_WORDING and err and name:
        return f"{BWRAP_WORDING[stage].format(name)}: {os.strerror(err)}"
    return exc.args[0] if exc.args else exc.reason.value


def main(argv=None) -> int:
    """Run bwrap's command line ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Raises:
        nothing: every failure is a ``bwrap: `` message and exit status 1, as bwrap.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
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
        return run(args, backend=os.environ.get("PYBWRAP_BACKEND", "native"))
    except SandboxError as exc:
        return die(bwrap_message(exc))
    except OSError as exc:   # from our own descriptor handling
        return die(f"{exc.strerror or exc}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
