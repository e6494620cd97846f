"""The bwrap backend's own init, seen from the launcher.

- our C init (native/psb_bwrap_init.c, carried by the native module) in a sealed
  execute-only memfd (:func:`init_memfd`) and the command line bwrap runs as the
  sandbox's first process (:func:`init_command`);
- what the init checks: :func:`bind_identities` (each bind source's inode, walked
  without following symlinks right before bwrap starts; the init's BIND_CHECK ops,
  backends/bwrap/bwrap_tail.py);
- the status pipe protocol (native/psb_bwrap_init.c): :data:`INIT_STARTED`,
  :data:`INIT_FAILED` and the failure record, read by :func:`read_words` (and turned
  into the typed error by bwrap_tail.failure).
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time

from ... import plan as P
from ...errors import BackendUnavailable, Reason, SetupError
from ...memfd import ProgramUnavailable, program_fd
from .bwrap_render import init_mode, join_path, proc_in_sandbox


def bind_identities(plan: P.Plan) -> list[tuple[str, int, int]]:
    """``(dest, st_dev, st_ino)`` of every bind of a host path, as the launcher finds the
    source right before bwrap starts, without following any symlink (sources are
    canonical: the policy resolved the ones the caller named). Our init checks each
    destination is that inode before it forks the command; binds that a later mount
    covers are left out.

    Raises:
        SetupError (symlink_in_path): a component of a source is a symlink now (as the
            native backend says it).
    """
    ops = plan.mount_ops
    out = []
    for i, op in enumerate(ops):
        if not isinstance(op, P.BindMount) or op.src is None or P.shadowed(i, ops):
            continue
        st = _lstat_no_symlinks(op.src, op.optional)
        if st is not None:
            out.append((op.dest, st.st_dev, st.st_ino))
    return out


def _lstat_no_symlinks(path: str, optional: bool):
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        for part in [p for p in path.split("/") if p]:
            try:
                nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if optional:
                    return None
                raise SetupError(f"bind source {path} vanished before the launch", Reason.BIND_SOURCE_MISSING,
                                 stage="bind", errno=errno.ENOENT, filename=path) from None
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise SetupError(f"bind source {path}: {part} is a symlink now (it was not when the policy "
                                 f"was made); refusing to follow it", Reason.SYMLINK_IN_PATH,
                                 stage="bind", errno=errno.ELOOP, filename=path)
        return os.fstat(fd)
    finally:
        os.close(fd)


def init_command(plan: P.Plan, init_fd: int, status_w: int, plan_fd: int, exe: str, argv: list[str]) -> list[str]:
    """The command bwrap runs as pid 1: our init, exec'd from its memfd, with the sealed
    memfd of its op array (``plan_fd``: backends/bwrap/bwrap_tail.py), then the real command
    (native/psb_bwrap_init.c).

    Raises:
        BackendUnavailable (bwrap_init_unavailable): the sandbox has no procfs at
            /proc, through which bwrap could exec the init.
    """
    proc = proc_in_sandbox(plan)
    if proc is None:
        raise BackendUnavailable(
            "the bwrap backend runs its own init through /proc/self/fd, and this policy shows no procfs at "
            "/proc; add Proc('/proc'), use as_pid_1=True (the command is pid 1) or the native backend",
            Reason.BWRAP_INIT_UNAVAILABLE)
    argv0 = plan.argv0 if plan.argv0 is not None else argv[0]
    return [f"{join_path(proc, 'self/fd')}/{init_fd}", str(status_w), str(init_fd), str(plan_fd), "--", exe, argv0,
            *argv[1:]]


def searchable_parents(dest: str, ops) -> bool:
    """Whether every directory above ``dest`` is one the sandbox's uid can search: a host
    directory, or one an op made itself. bwrap creates missing mount-point parents 0700
    for its setup's uid, which another sandbox uid cannot enter (execvp of the init
    through them fails with EACCES)."""
    made = {op.dest for op in ops if isinstance(op, (P.MakeDir, P.MountTmpfs))}
    parent = os.path.dirname(dest)
    while parent not in ("/", ""):
        host, _cover = P.host_path(parent, ops)
        if parent not in made and not (host is not None and os.path.isdir(host)):
            return False
        parent = os.path.dirname(parent)
    return True


def init_memfd() -> int:
    """An O_PATH descriptor of a sealed, execute-only memfd holding our init (made once
    per process, by pysandbox/memfd.py).

    Raises:
        BackendUnavailable (bwrap_init_unavailable): the native module (which carries
            the init) is missing or stale (a broken install: it is required), or memfds
            cannot be made.
    """
    try:
        return program_fd("psb-bwrap-init", "psb_bwrap_init_blob")
    except ProgramUnavailable as exc:
        raise BackendUnavailable(f"the bwrap backend's init: {exc}",
                                 Reason.BWRAP_INIT_UNAVAILABLE) from None


# Words on our init's status pipe (native/psb_bwrap_init.c): STARTED, or FAILED followed
# by the native executor's failure record (stage, op index, errno: backends/bwrap/bwrap_tail.py).
INIT_STARTED = 0x50534201
INIT_FAILED = 0x50534202


def read_words(fd: int, count: int, timeout: float) -> list[int]:
    """Up to ``count`` 4-byte words from ``fd`` (fewer at EOF or timeout)."""
    data = b""
    deadline = time.monotonic() + timeout
    while len(data) < 4 * count:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 4 * count - len(data))
        if not chunk:
            break
        data += chunk
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data) - len(data) % 4, 4)]


def init_unreachable(plan) -> BackendUnavailable | None:
    """Why bwrap cannot have exec'd our init for ``plan``, when a parent of its procfs is
    one bwrap made itself; else None."""
    proc_dest = proc_in_sandbox(plan)
    if not init_mode(plan) or proc_dest is None or searchable_parents(proc_dest, plan.mount_ops):
        return None
    return BackendUnavailable(
        f"bwrap could not exec the backend's init through {proc_dest}/self/fd: a directory above "
        f"{proc_dest} is one bwrap made itself (mode 0700, for its setup's uid), which the "
        f"sandbox's uid may not enter; the command did not run. Mount the procfs at /proc, or "
        f"create its parents with Dir(), or use the native backend", Reason.BWRAP_INIT_UNAVAILABLE)
