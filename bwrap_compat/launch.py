"""Run a checked bwrap command line with pysandbox, and do around the launch what
bwrap's monitor and init processes do: --info-fd and --json-status-fd output
(written right after the clone, with the new namespaces' ids), --sync-fd kept
open, --lock-file locks held, inherited
descriptors passed through, the working directory chosen as bwrap chooses it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)
import sys

from pysandbox import ops as O
from pysandbox import view
from pysandbox.errors import BwrapArgumentError, Reason, SetupError
from pysandbox.lifecycle import exit_status
from pysandbox.direct import DEVNULL, DirectProcess
from pysandbox.sandbox_start import compiled

from . import selfexec
from .lifeline import bind_to_parent
from .mapping import to_policy
from .args import BwrapArgs


def _err(message):
    return BwrapArgumentError(message, Reason.BWRAP_ARGUMENT_INVALID, message)


def working_dir(args: BwrapArgs, policy, env: dict) -> str:
    """--chdir, else the caller's directory if the sandbox has it, else $HOME, else /."""
    if args.chdir is not None:
        return policy.chdir
    try:
        old = os.getcwd()
    except OSError:
        old = None
    if old and view.is_dir(old, policy.fs):
        return old
    home = env.get("HOME")
    if home and home.startswith("/") and view.is_dir(os.path.normpath(home), policy.fs):
        return os.path.normpath(home)
    return "/"


def inherited_fds(exclude) -> tuple[int, ...]:
    """Descriptors above stderr without close-on-exec: bwrap's command inherits them."""
    out = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return ()
    for name in names:
        fd = int(name)
        if fd <= 2 or fd in exclude:
            continue
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                continue
        except OSError:
            continue   # the listing's own descriptor
        out.append(fd)
    return tuple(sorted(out))


def take_locks(paths, plan) -> list[int]:
    """Read locks on the host files behind sandbox ``paths`` (held until we exit)."""
    held = []
    for path in paths:
        host, _ = view.host_path(path, plan.mount_ops)
        if host is None:
            raise _err(f"Unable to open lock file {path}: pybwrap can only lock a file backed by the host")
        try:
            fd = os.open(host, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _err(f"Unable to open lock file {path}: {os.strerror(exc.errno)}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise _err(f"Unable to lock file {path}: {os.strerror(exc.errno)}") from None
        held.append(fd)
    return held


def namespace_ids(pid: int, names) -> list[tuple[str, int]]:
    """(name, inode) of the sandbox's namespaces, bwrap's namespace_ids_read.

    The sandbox's init may be non-dumpable (its /proc/PID/ns unreadable to an
    unprivileged caller); its children, exec'd, are not: they are asked next."""
    candidates = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            candidates += [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        pass
    for cand in candidates:
        out = []
        for name in names:
            try:
                out.append((name, os.stat(f"/proc/{cand}/ns/{name}").st_ino))
            except OSError:
                break
        else:
            return out
    return []


def write_all(fd: int, text: str) -> None:
    data = text.encode()
    while data:
        data = data[os.write(fd, data):]


def info_document(pid: int, ids) -> str:
    return "{\n    \"child-pid\": %i" % pid + "".join(",\n    \"%s-namespace\": %d" % i for i in ids) + "\n}\n"


def json_status_document(pid: int, ids) -> str:
    return "{ \"child-pid\": %i" % pid + "".join(", \"%s-namespace\": %d" % i for i in ids) + " }\n"


def run(args: BwrapArgs, backend: str = "native", parent_pid: int | None = None) -> int:
    """Launch ``args`` (already :func:`~bwrap_compat.parser.check`-ed) and wait for it.

    ``parent_pid``: this process is pybwrap itself, started by ``parent_pid``; with
    ``--die-with-parent`` it then dies with that parent (before any lock is taken).

    Returns the exit status bwrap would return. Raises:
        SandboxError: any setup failure (printed as ``bwrap: <message>``, exit 1).
        OSError: an --info-fd/--json-status-fd write failed.
    """
    policy, compat = to_policy(args)
    if args.chdir is None:
        # bwrap's chdir(old_cwd) else $HOME else /, read off the policy's own view.
        policy = policy.replace(chdir=working_dir(args, policy, policy.env.apply(os.environ)))
    if args.chdir is not None:   # before the compile's own check, for bwrap's wording
        _check_chdir(policy.chdir, args.chdir, policy.fs)
    plan = compiled(policy, allow_host_mountpoints=True)
    command, shown = list(args.command), args.command[0]
    if sys.executable and selfexec.names_self(shown, plan.chdir, plan.mount_ops):
        # bwrap's /proc/self/exe is bwrap: run pybwrap, not the bare interpreter.
        missing = selfexec.missing_files(plan.mount_ops)
        if missing is not None:
            raise _err(f"execvp {shown}: pybwrap runs itself there with {missing}, which the sandbox does not show")
        command = selfexec.rewrite(command, policy.argv0)
        if policy.argv0 is not None:   # now the nested pybwrap's sys.argv[0]
            policy = policy.replace(argv0=None)
            plan = compiled(policy, allow_host_mountpoints=True)
    if args.die_with_parent and parent_pid is not None:
        bind_to_parent(parent_pid)
    locks = take_locks(compat.lock_files, plan)
    pass_fds = inherited_fds(set(compat.consumed_fds) | set(locks))
    # The executor reads (and closes, in the sandbox) --block-fd and --userns-block-fd.
    waits = (policy.block_fd, policy.userns_block_fd)
    stdio = {}
    for fd in compat.consumed_fds:
        if fd not in (compat.info_fd, compat.json_status_fd, compat.sync_fd) + waits:
            _close(fd)
            if fd <= 2:
                # bwrap read it (--file 0 ...) and closed it: its command starts with
                # that slot closed. The executor hands a command exactly three standard
                # descriptors, so it gets /dev/null there (README.md: the corpus's tolerated
                # differences, the --file 0 entry).
                stdio[("stdin", "stdout", "stderr")[fd]] = DEVNULL
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    def report(pid: int, ids) -> None:
        if compat.info_fd is not None:
            write_all(compat.info_fd, info_document(pid, ids))
            _close(compat.info_fd)
        if compat.json_status_fd is not None:
            write_all(compat.json_status_fd, json_status_document(pid, ids))

    cloned: list = []   # (pid, ids) as read right after the clone, not yet reported

    def started(pid: int) -> None:
        # As bwrap's monitor, right after the clone and before the setup. The setup's tail
        # then runs the command in a copy of its mount namespace (one tail with the bwrap
        # backend, docs/ARCHITECTURE.md), so the document waits for the exec, where the
        # command's namespaces are read, unless the setup waits for this very document
        # (--userns-block-fd, --block-fd: then the mount namespace named is the setup's).
        ids = namespace_ids(pid, compat.unshared)
        if any(fd is not None for fd in waits):
            report(pid, ids)
        else:
            cloned.append((pid, ids))

    reporting = compat.info_fd is not None or compat.json_status_fd is not None
    try:
        try:
            proc = DirectProcess(command, policy=policy, backend=backend, pass_fds=pass_fds, **stdio,
                                 _host_mountpoints=True, on_start=started if reporting else None,
                                 close_in_setup=tuple(fd for fd in (compat.info_fd, compat.json_status_fd) if fd is not None))
        except BaseException:
            for pid, ids in cloned:   # the setup failed: what bwrap's monitor wrote at the clone
                report(pid, ids)
            raise
        try:
            for pid, ids in cloned:
                report(pid, namespace_ids(pid, compat.unshared) or ids)
        except BaseException:   # as bwrap, whose monitor ends the sandbox when the write fails
            proc.kill()
            proc.wait()
            raise
    except SetupError as exc:
        if exc.stage == "symlink" and exc.errno == errno.EEXIST and exc.op is not None:
            # bwrap 0.9+ words it by what is there (the same link again was accepted)
            exc.existing_link = existing_link(exc.filename, plan.ops[:exc.op])
        raise
    except FileNotFoundError:
        raise _err(f"execvp {shown}: {os.strerror(errno.ENOENT)}") from None
    except PermissionError:
        raise _err(f"execvp {shown}: {os.strerror(errno.EACCES)}") from None
    finally:
        for fd in waits:
            if fd is not None:
                _close(fd)
    code = exit_status(proc.wait())
    if compat.json_status_fd is not None:
        try:
            write_all(compat.json_status_fd, "{ \"exit-code\": %i }\n" % code)
        except OSError:
            pass
        _close(compat.json_status_fd)
    for fd in locks:
        _close(fd)
    return code


def existing_link(path: str, done) -> str | None:
    """The target of the symlink at sandbox ``path`` after the plan ops ``done``, or None
    when what is there is not a symlink (bwrap's two ``--symlink`` messages)."""
    for i in range(len(done) - 1, -1, -1):
        op = done[i]
        if getattr(op, "dest", None) == path:
            return op.target if isinstance(op, O.MakeSymlink) else None
        if view.is_mount(op) and view.under(path, op.dest):
            if isinstance(op, O.MinimalDev):
                from pysandbox.backends.native_ops import DEV_LINKS
                name = path[len(op.dest.rstrip("/")) + 1:]
                return dict(DEV_LINKS).get(name, "pts/ptmx" if name == "ptmx" else None)
            host, _ = view.host_path(path, done[:i + 1])
            return os.readlink(host) if host is not None and os.path.islink(host) else None
    return None


def _check_chdir(path: str, given: str, fs) -> None:
    """bwrap's chdir failure, with its message, where the host can tell in advance
    (``fs``: the policy's filesystem operations, read by ``view``)."""
    host, _ = view.host_path(path, fs)
    if host is None:
        return   # not backed by the host: the executor's chdir decides
    if not os.path.lexists(host):
        raise _err(f"Can't chdir to {given}: {os.strerror(errno.ENOENT)}")
    if not os.path.isdir(host):
        raise _err(f"Can't chdir to {given}: {os.strerror(errno.ENOTDIR)}")


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass

