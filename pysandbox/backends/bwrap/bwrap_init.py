"""The bwrap backend's own init, seen from the launcher.

- our C init (native/psb_bwrap_init.c, carried by the native module) in a sealed
  execute-only memfd (:func:`init_memfd`) and the command line bwrap runs as the
  sandbox's first process (:func:`init_command`);
- what the init checks and covers: :func:`bind_identities` (each bind source's inode,
  walked without following symlinks right before bwrap starts) and
  :func:`proc_readonly_paths`;
- the status pipe protocol (native/psb_bwrap_init.c): :data:`INIT_STARTED`,
  :data:`INIT_FAILED` and the failed step, read by :func:`read_words` and turned into
  the typed error by :func:`init_failure`.
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
from ...checks import CAPABILITIES
from .. import landlock, tail
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


def proc_readonly_paths(plan: P.Plan) -> list[str]:
    """Every ``plan.PROC_READONLY`` entry under each proc mount that no later mount
    covers, for our init."""
    ops = plan.mount_ops
    return [join_path(op.dest, name) for i, op in enumerate(ops) if isinstance(op, P.MountProc)
            and not P.shadowed(i, ops) for name in P.PROC_READONLY]


def init_command(plan: P.Plan, init_fd: int, status_w: int, data_fd, exe: str, argv: list[str],
                 binds, pty: tuple[int, int, int] | None = None, proxy_socket: int | None = None,
                 gate: int | None = None, notify_socket: int | None = None) -> list[str]:
    """The command bwrap runs as pid 1: our init, exec'd from its memfd, with its
    setup options (native/psb_bwrap_init.c), then the real command. ``pty``: (socket,
    stdio mask, packed window size) of the sandbox's terminal (``-t``). ``proxy_socket``:
    network proxy mode, where the init sends the listener of the plan's ProxyListener
    (``-p``, first: before anything of the command exists). ``gate``: as_pid_1, the read
    end of the pipe on which the launcher says its lifetime monitor exists (``-w``: no
    byte, no command; pysandbox/backends/monitor.py). ``notify_socket``: where the
    Seccomp op marked notify sends its listener (``-S``; Policy.report_denials).

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
    opts = []
    listener = plan.first(P.ProxyListener)
    if listener is not None:
        if proxy_socket is None:
            raise SetupError("network proxy mode needs the launcher's proxy socket", Reason.SETUP_FAILED,
                             stage="proxy listener")
        opts += ["-p", str(proxy_socket), str(listener.port)]
    opts += ["-N", "-P"] + (["-x"] if init_mode(plan) == "exec" else [])
    if gate is not None:
        opts += ["-w", str(gate)]
    ll = landlock.kind(plan.command_may_mount)
    if init_mode(plan) != "exec" and ll != landlock.NONE:
        opts += ["-L", str(ll)]   # the command in a Landlock domain, the C init dumpable (its owner reads it)
    for path in proc_readonly_paths(plan):
        opts += ["-r", path]
    for dest, dev, ino in binds:
        opts += ["-b", dest, str(dev), str(ino)]
    keep = 0
    for op in plan.ops:
        if isinstance(op, P.Seccomp):
            if op.notify:
                if notify_socket is None or init_fd is None:
                    raise BackendUnavailable("report_denials on the bwrap backend needs its C init (a procfs at /proc "
                                             "in the sandbox) and the launcher's notification socket",
                                             Reason.BWRAP_INIT_UNAVAILABLE)
                opts += ["-S", str(notify_socket)]
            opts += ["-s", str(data_fd(op.program))]
        elif isinstance(op, P.DropCapabilities):
            for name in op.keep:
                keep |= 1 << CAPABILITIES.index(name)
            if not op.ambient:
                opts.append("-n")   # kept ones permitted and effective only (caps_ambient=False)
    opts += ["-c", format(keep, "x")]
    if pty is not None:
        opts += ["-t", *map(str, pty)]
    for limit in plan.rlimits:
        opts += ["-R", *map(str, limit)]
    argv0 = plan.argv0 if plan.argv0 is not None else argv[0]
    return [f"{join_path(proc, 'self/fd')}/{init_fd}", str(status_w), str(init_fd), *opts, "--", exe, argv0,
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
# by the failure record (step: enum psb_tail_step, backends/tail.py; errno; which option).
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


def init_failure(step: int, err: int, k: int, exe: str, plan: P.Plan) -> Exception:
    """The typed error for our init's ``INIT_FAILED`` record: tail step ``step`` (enum
    psb_tail_step) failed with errno ``err`` at its ``k``-th option (the K-th -s, -R or
    -r); the command did not run. A step of the setup tail reads as it does on the native
    backend (backends/tail.py), naming the plan step."""
    name = tail.STEPS[step - 1] if 0 < step <= len(tail.STEPS) else None
    if name == "BIND_CHANGED":
        return SetupError("a bind's destination is not the inode the launcher validated (a symlink "
                          "or another mount was swapped in before bwrap bound it); the command "
                          "did not run", Reason.BIND_SOURCE_CHANGED, stage="bind", errno=errno.ELOOP)
    if name == "RLIMIT" and 0 <= k < len(plan.rlimits):
        return tail.error(name, err, rlimit=plan.rlimits[k])
    if name == "LISTEN":
        port = getattr(plan.first(P.ProxyListener), "port", 0)
        return tail.error(name, err, plan_index=tail.plan_step(plan, name, k), filename=f"127.0.0.1:{port}")
    if name == "PROC_READONLY":
        paths = proc_readonly_paths(plan)
        return tail.error(name, err, filename=paths[k] if 0 <= k < len(paths) else None)
    if name in ("CAPS", "NNP", "SECCOMP", "LANDLOCK", "PTY", "EXEC"):
        return tail.error(name, err, plan_index=tail.plan_step(plan, name, k), exe=exe)
    what = {"USAGE": "argument", "MOUNT_PRIVATE": "mount namespace", "FORK": "fork",
            "LIFELINE": "lifeline"}.get(name or "", f"step {step}")
    return SetupError(f"the bwrap backend's init failed at its {what} step ({os.strerror(err) if err else err}); "
                      f"the command did not run", Reason.SETUP_FAILED, stage="init", errno=err or None)


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
