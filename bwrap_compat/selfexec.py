"""The command ``/proc/self/exe``: bwrap running itself inside its sandbox.

Programs nest sandboxes with ``bwrap ... -- /proc/self/exe --unshare-all ...`` (and
bwrap's own tests do): the sandbox's first process is bwrap's, so the magic link
names the bwrap binary. Under pybwrap that process comes from the Python interpreter,
so the link names the interpreter, which would read pybwrap's options as its own and
fail (exit 2). :func:`rewrite` makes the command run pybwrap instead, as bwrap would
run bwrap:

    [<interpreter>, <isolation flags>, "-c", <run bwrap_compat.cli.main>, ARGV0, ARGS...]

``ARGV0`` is what the nested bwrap would see as its ``argv[0]`` (``--argv0`` if
given, else the command as written): the nested pybwrap's ``sys.argv[0]``, only
shown in its usage line, as bwrap's. The interpreter is exec'd by its path, so it
and pybwrap's files must be visible in the sandbox (bwrap's binary needs only the
magic link); where they are not, the launch fails with that reason.

Nothing runs outside the sandbox: the nested pybwrap is the sandbox's command, with
the sandbox's namespaces, capabilities, no_new_privs and seccomp filters, exactly as
the interpreter the magic link named would have been. The rewrite applies only where
the command resolves to a procfs's ``self/exe`` (or ``thread-self/exe``) in the
sandbox: without a procfs there, the command fails as under bwrap (ENOENT).
"""

from __future__ import annotations

import os
import sys

from pysandbox import ops as O
from pysandbox import view

SELF_LINKS = ("self/exe", "thread-self/exe")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # holds bwrap_compat/
RUN_MAIN = ("import sys; sys.path.insert(0, {root!r}); del sys.argv[0]; "
            "from bwrap_compat.cli import main; sys.exit(main())")


def _procfs_at(path: str, mount_ops) -> bool:
    """Whether ``path`` in the sandbox is a procfs: a new one, or the host's bound there."""
    host, op = view.host_path(path, mount_ops)
    if host is not None:
        return host == "/proc"
    return isinstance(op, O.MountProc) and op.dest == path


def names_self(name: str, cwd: str, mount_ops) -> bool:
    """Whether the command ``name``, exec'd in the sandbox from ``cwd``, is the magic link
    to the executing process's own binary (bwrap's ``/proc/self/exe``)."""
    if "/" not in name:
        return False   # a PATH search never reaches a procfs's self/exe
    path = os.path.normpath(os.path.join(cwd, name))
    path = "/" + path.lstrip("/")
    for link in SELF_LINKS:
        if path.endswith("/" + link):
            return _procfs_at(path[:-len(link) - 1] or "/", mount_ops)
    return False


def interpreter_flags() -> list[str]:
    """The running interpreter's isolation flags, for the nested one."""
    f = sys.flags
    if f.isolated:
        return ["-I"] + (["-S"] if f.no_site else [])
    return [flag for flag, on in (("-E", f.ignore_environment), ("-s", f.no_user_site), ("-S", f.no_site))
            if on]


def rewrite(command: list[str], argv0: str | None) -> list[str]:
    """The command that runs pybwrap with ``command[1:]``, its ``argv[0]`` being ``argv0``
    (bwrap's --argv0) or else ``command[0]``."""
    return [sys.executable, *interpreter_flags(), "-c", RUN_MAIN.format(root=PACKAGE_ROOT),
            argv0 if argv0 is not None else command[0], *command[1:]]


def missing_files(mount_ops) -> str | None:
    """The first of the interpreter and pybwrap's own package the sandbox does not show,
    or None."""
    for path in (sys.executable, os.path.join(PACKAGE_ROOT, "bwrap_compat", "cli.py")):
        if not view.exists(path, mount_ops):
            return path
    return None
