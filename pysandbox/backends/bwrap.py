"""The bubblewrap backend: a Plan rendered as a bwrap command line.

Which bwrap: the constructor's ``bwrap`` argument, then ``$PYSANDBOX_BWRAP``, then
``PATH`` (no built-in fallback), symlinks resolved, never one inside a path the
policy makes writable. A setuid/setgid bwrap is refused (``bwrap_setuid_rejected``)
unless the caller opts in with ``BwrapBackend(allow_setuid=True)`` or
``PYSANDBOX_ALLOW_SETUID_BWRAP=1``. An option the installed bwrap lacks
(``--help`` is parsed) is an error (``bwrap_option_unsupported``), never dropped.

Every launch has ``--unshare-user``, ``--cap-drop ALL`` (then ``--cap-add`` for the
kept ones, and for what our init's setup needs: it drops those) and ``--die-with-parent``. The options travel NUL-separated through a
memfd (``--args FD``), file data and seccomp programs through memfds; bwrap reads
and closes them, and it is started with only stdio, those descriptors and the
caller's ``pass_fds``, so nothing else reaches the command.

Setup failures: bwrap reports them as exit 1 on the command's stderr, which would
look like the command's own status. So before the first launch of a plan,
``check(plan)`` runs ``bwrap ARGS -- true`` with the plan's exact arguments, once
without and once with ``--unshare-net``, and maps bwrap's message to a reason code;
the result is cached per plan for the life of the process.

Our init (native/psb_bwrap_init.c, carried by the native module, exec'd by bwrap from a
sealed execute-only memfd through ``<procfs>/self/fd/N``): with a pid namespace (not
``as_pid_1``) it is pid 1 under ``--as-pid-1``, so bwrap's own pid 1 (same uid, dumpable:
ptraceable by the command) never exists. It is undumpable from its first instruction,
re-arms PR_SET_PDEATHSIG and checks its lifeline (the launcher still holds the status
pipe); with a temporary CAP_SYS_ADMIN and CAP_SETPCAP it unshares a mount namespace of
its own, makes the tree private (no host mount propagates in), remounts every
``plan.PROC_READONLY`` entry of each proc mount read-only, checks each bind destination
is the inode the launcher validated (sources walked without following symlinks right
before bwrap starts: ``symlink_in_path``; a different inode: ``bind_source_changed``), drops every capability the policy does not
keep (bounding set included; no_new_privs stays), then forks the command, which loads the
seccomp programs and execs. It reaps, forwards SIGTERM/INT/HUP/QUIT/USR1/USR2 and reports
the command's raw wait status on a pipe only it holds. ``as_pid_1`` or no pid namespace:
the same init setup, then it execs the command in its own process (exec mode). Without
the native module, or with a pid namespace and no procfs, the same init runs in Python
(``_bwrap_pyinit.py``) where this interpreter is visible in the sandbox, else a pid
namespace fails closed (``bwrap_init_unavailable``); a sandbox without a pid namespace
(or as_pid_1) that shows no procfs runs without an init.

Lifetime: bwrap is forked by one long-lived spawner thread with PR_SET_PDEATHSIG set
before exec, so the sandbox dies with the launching process, not with the thread that
called Popen; spawn returns once our init reported the command exec'd (without it: once
bwrap reported the sandbox, ``--info-fd``, and the command was seen executed). kill()
SIGKILLs the sandbox's pid 1 by pidfd (the whole pid namespace dies) and bwrap.
``BwrapChild.forward_signal`` signals our init, which forwards (without it: the command
itself). Known gaps: as_pid_1, the command is pid 1 and may clear its own PDEATHSIG: a
SIGKILLed launcher does not end it (``status`` info ``as_pid_1_lifetime``); bubblewrap
0.8's child binds itself to bwrap only at the end of its setup, so a launcher SIGKILLed
in those milliseconds can leave that child blocked in bwrap's setup (never our init or
the command: the init exits at its lifeline check).

Exit status: a command killed by signal N is returncode -N, as on the native backend
(our init reports the raw status); with as_pid_1 or without our init, bwrap's status
(128+N). ``Policy.argv0`` needs bwrap >= 0.9 (``--argv0``) only without our init.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass

from .. import probe as _probe
from ..errors import (BackendUnavailable, BwrapOptionUnsupported, BwrapProbeFailed, PolicyError, Reason, SandboxError,
                      SetupError, error_for)
from .. import plan as P
from .. import view
from ..policy import Bind, Network, Overlay
from .base import BackendStatus, CapabilityStatus, Launch

PROBE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NAMESPACE_OPTIONS = (("user", "--unshare-user"), ("pid", "--unshare-pid"), ("ipc", "--unshare-ipc"),
                      ("uts", "--unshare-uts"), ("cgroup", "--unshare-cgroup"), ("net", "--unshare-net"))


# ---------------------------------------------------------------- rendering

def _octal(mode: int) -> str:
    return format(mode, "04o")


def init_mode(plan: P.Plan) -> str | None:
    """How our init runs for ``plan``: ``"fork"``: as pid 1 of the pid namespace (not
    ``as_pid_1``), it forks the command, reaps and reports its status; ``"exec"``: a
    setup step that execs the command in its own process (``as_pid_1``: the command is
    pid 1; or no pid namespace); None: no init (the sandbox shows no procfs to exec it
    through, and the command need not be forked)."""
    if "pid" in plan.namespaces and not plan.as_pid_1:
        return "fork"
    return "exec" if proc_in_sandbox(plan) is not None else None


def uses_init(plan: P.Plan) -> bool:
    """Whether our init is ``plan``'s pid 1 (a pid namespace, not ``as_pid_1``)."""
    return init_mode(plan) == "fork"


# What our init needs for its setup (a mount namespace of its own, the tree made private,
# procfs entries remounted read-only, the bounding set cleared); it drops them before the
# command is forked.
INIT_CAPS = ("sys_admin", "setpcap")


def render(plan: P.Plan, data_fd, *, network: bool = True, probe: bool = False) -> list[tuple]:
    """The bwrap options for ``plan``, as a list of ``(option, *values)`` tuples.

    ``data_fd(bytes) -> int`` stores file contents and seccomp programs and returns the
    descriptor bwrap reads them from. ``network=False`` leaves out ``--unshare-net``
    (the filesystem half of a probe). ``probe=True`` replaces the caller's data
    descriptors (``File(fd=...)``) with empty data, so a probe consumes nothing.

    With our init (:func:`init_mode`): ``--cap-add`` of :data:`INIT_CAPS` (the init
    drops them), ``--as-pid-1`` (the init, or the command with ``as_pid_1``, is pid 1),
    no ``--add-seccomp-fd`` and no ``--argv0`` (:func:`init_command` hands those to the
    init). There is no init only when the sandbox shows no procfs (so nothing of
    ``plan.PROC_READONLY`` to cover either).

    Raises:
        PolicyError: an op this renderer does not know (a bug, not user input).
    """
    out: list[tuple] = []
    namespaces = plan.namespaces
    for name, option in _NAMESPACE_OPTIONS:
        if name in namespaces and (name != "net" or network):
            out.append((option,))
    idmap = plan.idmap
    out.append(("--uid", str(idmap.uid)))
    out.append(("--gid", str(idmap.gid)))
    # Always, whatever plan.die_with_parent says: the lifetime row of THREAT_MODEL.md.
    out.append(("--die-with-parent",))
    init = init_mode(plan)
    if plan.as_pid_1 or init == "fork":
        out.append(("--as-pid-1",))
    if plan.argv0 is not None and not init:
        out.append(("--argv0", plan.argv0))
    done: list = []
    for op in plan.ops:
        if isinstance(op, P.SetHostname):
            out.append(("--hostname", op.name))
        elif isinstance(op, P.DisableUserns):
            out.append(("--disable-userns",))
        elif isinstance(op, P.DropCapabilities):
            out.append(("--cap-drop", "ALL"))
            for cap in sorted(set(op.keep) | (set(INIT_CAPS) if init else set())):
                out.append(("--cap-add", "CAP_" + cap.upper()))
        elif isinstance(op, P.Seccomp):
            if not init:
                out.append(("--add-seccomp-fd", str(data_fd(op.program))))
        elif isinstance(op, P.NewSession):
            out.append(("--new-session",))
        elif isinstance(op, P.Chdir):
            out.append(("--chdir", op.path))
        elif isinstance(op, P.MOUNT_OPS):
            if not _vanished_hide(op, done):
                out.extend(_render_mount(op, data_fd, probe))
            done.append(op)
        elif isinstance(op, (P.Unshare, P.IdMap, P.PdeathSig, P.PivotRoot, P.LoopbackUp, P.NoNewPrivs)):
            pass  # rendered above, or what bwrap always does (pivot_root, lo up, no_new_privs)
        else:
            raise PolicyError(f"the bwrap backend cannot render {op!r}", Reason.INVALID_VALUE, op)
    return out


def _join(dest: str, name: str) -> str:
    return dest.rstrip("/") + "/" + name


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
    import errno
    import stat as _stat
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
            if _stat.S_ISLNK(os.fstat(fd).st_mode):
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
    return [_join(op.dest, name) for i, op in enumerate(ops) if isinstance(op, P.MountProc)
            and not P.shadowed(i, ops) for name in P.PROC_READONLY]


def init_command(plan: P.Plan, init_fd: int, status_w: int, data_fd, exe: str, argv: list[str],
                 binds) -> list[str]:
    """The command bwrap runs as pid 1: our init, exec'd from its memfd, with its
    setup options (native/psb_bwrap_init.c), then the real command.

    Raises:
        BackendUnavailable (bwrap_init_unavailable): the sandbox has no procfs at
            /proc, through which bwrap could exec the init.
    """
    from ..policy import CAPABILITIES
    proc = proc_in_sandbox(plan)
    if init_fd is None:
        proc = ""   # the Python init: exec'd by path, no procfs needed
    elif proc is None:
        raise BackendUnavailable(
            "the bwrap backend runs its own init through /proc/self/fd, and this policy shows no procfs at "
            "/proc; add Proc('/proc'), use as_pid_1=True (the command is pid 1) or the native backend",
            Reason.BWRAP_INIT_UNAVAILABLE)
    opts = ["-N", "-P"] + (["-x"] if init_mode(plan) == "exec" else [])
    for path in proc_readonly_paths(plan):
        opts += ["-r", path]
    for dest, dev, ino in binds:
        opts += ["-b", dest, str(dev), str(ino)]
    keep = 0
    for op in plan.ops:
        if isinstance(op, P.Seccomp):
            opts += ["-s", str(data_fd(op.program))]
        elif isinstance(op, P.DropCapabilities):
            for name in op.keep:
                keep |= 1 << CAPABILITIES.index(name)
    opts += ["-c", format(keep, "x")]
    argv0 = plan.argv0 if plan.argv0 is not None else argv[0]
    tail = [*opts, "--", exe, argv0, *argv[1:]]
    if init_fd is None:
        import sys
        from ._bwrap_pyinit import SOURCE
        return [sys.executable, "-I", "-S", "-c", SOURCE, str(status_w), "-1", *tail]
    return [f"{_join(proc, 'self/fd')}/{init_fd}", str(status_w), str(init_fd), *tail]


def proc_in_sandbox(plan: P.Plan) -> str | None:
    """A sandbox path where a procfs is visible at the end of the setup (a ``Proc``
    mount not covered later, else the host's /proc shown through a bind: bwrap binds
    are recursive), or None. bwrap execs our init through ``PATH/self/fd/N``."""
    ops = plan.mount_ops
    dests = [op.dest for op in ops if isinstance(op, P.MountProc)]
    for dest in sorted(dests, key=lambda d: d != "/proc"):
        _host, cover = P.host_path(_join(dest, "self"), ops)
        if isinstance(cover, P.MountProc) and cover.dest == dest:
            return dest
    host, cover = P.host_path("/proc", ops)
    if isinstance(cover, P.BindMount) and host == "/proc" and os.path.ismount("/proc") \
            and os.path.isdir("/proc/self/fd"):
        return "/proc"
    return None


def _searchable_parents(dest: str, ops) -> bool:
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


def python_init_usable(plan: P.Plan) -> bool:
    """Whether the fallback init (Python, when the native module is missing) can run in
    ``plan``'s sandbox: this interpreter is visible there at its own path."""
    import sys
    host, _cover = P.host_path(sys.executable, plan.mount_ops)
    return host == sys.executable and os.path.exists(sys.executable)


def init_program(plan: P.Plan) -> int | None:
    """The C init's memfd (O_PATH descriptor), or None for the Python fallback init.

    Raises:
        BackendUnavailable (bwrap_init_unavailable): neither can run here.
    """
    try:
        fd = init_memfd()
    except BackendUnavailable:
        if python_init_usable(plan):
            return None
        raise
    if proc_in_sandbox(plan) is None and python_init_usable(plan):
        return None   # no procfs to exec the C init through
    return fd


_init_lock = threading.Lock()
_init_fd: int | None = None


def init_memfd() -> int:
    """An O_PATH descriptor of a sealed, execute-only memfd holding our init (made once
    per process). Execute-only: exec of a file its process cannot read leaves it
    undumpable from the first instruction.

    Raises:
        BackendUnavailable (bwrap_init_unavailable): the native module (which carries
            the init) is missing or was built without it, or memfds cannot be made.
    """
    global _init_fd
    with _init_lock:
        if _init_fd is not None:
            return _init_fd
        try:
            from .. import _native
            ptr = _native.ffi.new("const unsigned char **")
            size = _native.lib.psb_bwrap_init_blob(ptr)
            blob = bytes(_native.ffi.buffer(ptr[0], size))
        except (ImportError, AttributeError) as exc:
            raise BackendUnavailable(
                f"the bwrap backend's init is carried by the native module, which is missing ({exc}); "
                f"rebuild it (pip install -e .) or use as_pid_1=True", Reason.BWRAP_INIT_UNAVAILABLE) from None
        if not blob:
            raise BackendUnavailable("the native module was built without the bwrap init (no C compiler "
                                     "for native/psb_bwrap_init.c)", Reason.BWRAP_INIT_UNAVAILABLE)
        import fcntl
        try:
            try:
                fd = os.memfd_create("psb-bwrap-init", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | 0x0010)  # MFD_EXEC
            except OSError:
                fd = os.memfd_create("psb-bwrap-init", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            try:
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view):]
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
                            | fcntl.F_SEAL_SEAL)
                os.fchmod(fd, 0o111)
                # Keep an O_PATH descriptor, not the writable one (exec would be ETXTBSY).
                pfd = os.open(f"/proc/self/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
            finally:
                os.close(fd)
        except OSError as exc:
            raise BackendUnavailable(f"cannot make the bwrap init's memfd: {exc}",
                                     Reason.BWRAP_INIT_UNAVAILABLE) from None
        while pfd < 3:   # never shadow a stdio slot in bwrap
            pfd = os.dup(pfd)   # the low one stays open; harmless
        _init_fd = pfd
        return pfd


def _vanished_hide(op, done) -> bool:
    """A hiding node (compiled from Hide) whose host path has gone since the plan was
    compiled: already hidden, and bwrap could not create its mount point any more."""
    hiding = (isinstance(op, P.MountTmpfs) and op.mode == P.HIDE_MODE and op.readonly) or \
        (isinstance(op, P.WriteFile) and op.data == b"" and op.mode == P.HIDE_MODE and op.bind and op.readonly)
    if not hiding:
        return False
    host, _cover = P.host_path(op.dest, done)
    return host is not None and not os.path.lexists(host)


def _render_mount(op, data_fd, probe: bool) -> list[tuple]:
    if isinstance(op, P.BindMount):
        if op.src_fd is not None:
            kind = "--dev-bind-fd" if op.dev else "--ro-bind-fd" if op.readonly else "--bind-fd"
            return [(kind, str(op.src_fd), op.dest)]
        kind = "--dev-bind" if op.dev else "--ro-bind" if op.readonly else "--bind"
        out = [(kind + ("-try" if op.optional else ""), op.src, op.dest)]
        if op.dev and op.readonly:
            out.append(("--remount-ro", op.dest))
        return out
    if isinstance(op, P.MountTmpfs):
        out = []
        if op.mode is not None:
            out.append(("--perms", _octal(op.mode)))
        if op.size is not None:
            out.append(("--size", str(op.size)))
        out.append(("--tmpfs", op.dest))
        if op.readonly:
            out.append(("--remount-ro", op.dest))
        return out
    if isinstance(op, P.WriteFile):
        if op.data is not None or probe:
            fd = data_fd(op.data or b"")
        else:
            fd = op.fd
        kind = "--ro-bind-data" if op.readonly else "--bind-data" if op.bind else "--file"
        perms = [("--perms", _octal(op.mode))] if op.mode is not None else []
        return perms + [(kind, str(fd), op.dest)]
    if isinstance(op, P.MakeDir):
        perms = [("--perms", _octal(op.mode))] if op.mode is not None else []
        return perms + [("--dir", op.dest)]
    if isinstance(op, P.RemountReadonly):
        return [("--remount-ro", op.dest)]
    if isinstance(op, P.ChangeMode):
        return [("--chmod", _octal(op.mode), op.dest)]
    if isinstance(op, P.MountOverlay):
        srcs = [("--overlay-src", src) for src in op.lower]   # bottom first, as bwrap wants them
        if op.upper is not None:
            return srcs + [("--overlay", op.upper, op.work, op.dest)]
        return srcs + [("--tmp-overlay" if op.tmp else "--ro-overlay", op.dest)]
    if isinstance(op, P.MinimalDev):
        return [("--dev", op.dest)]
    if isinstance(op, P.MountProc):
        return [("--proc", op.dest)]
    if isinstance(op, P.MountMqueue):
        return [("--mqueue", op.dest)]
    if isinstance(op, P.MakeSymlink):
        return [("--symlink", op.target, op.dest)]
    raise PolicyError(f"the bwrap backend cannot render {op!r}", Reason.INVALID_VALUE, op)


def flatten(options: list[tuple]) -> list[str]:
    return [word for item in options for word in item]


def options_used(options: list[tuple]) -> set[str]:
    return {item[0] for item in options}


def caller_fds(plan: P.Plan) -> set[int]:
    """Descriptors of the caller that the options name (bind-fd sources, file data)."""
    fds = set()
    for op in plan.mount_ops:
        if isinstance(op, P.BindMount) and op.src_fd is not None:
            fds.add(op.src_fd)
        elif isinstance(op, P.WriteFile) and op.fd is not None:
            fds.add(op.fd)
    return fds


class _DataFds:
    """memfds holding data for bwrap; closed by :meth:`close` once bwrap has started."""

    def __init__(self):
        self.fds: list[int] = []

    def __call__(self, data: bytes) -> int:
        # close-on-exec here; Popen(pass_fds=...) makes it inheritable in bwrap only
        fd = os.memfd_create("pysandbox-data", os.MFD_CLOEXEC)
        if fd < 3:   # never shadow stdio slots in the child
            new = os.dup(fd) if fd >= 0 else fd
            while new < 3:
                new = os.dup(new)
            os.close(fd)
            fd = new
        self.fds.append(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def close(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()


# ---------------------------------------------------------------- probe failures

_USERNS_MARKERS = ("no permissions to creating new namespace", "setting up uid map", "setting up gid map",
                   "uid_map", "gid_map", "user namespace", "creating new namespace failed",
                   "max_user_namespaces")


def classify(message: str, *, network_part: bool) -> Reason:
    """Map a bwrap error message from a probe to a reason code.

    ``network_part``: the probe differed from a successful one only by ``--unshare-net``,
    so a failure there is the network namespace's (or loopback's) fault.
    """
    m = message.lower()
    if "unknown option" in m or "unrecognized option" in m:
        return Reason.BWRAP_OPTION_UNSUPPORTED
    if "loopback" in m or "rtm_newaddr" in m or "rtm_newlink" in m:
        return Reason.LOOPBACK_SETUP_FAILED
    if network_part:
        return Reason.NETWORK_NAMESPACE_UNAVAILABLE
    if any(marker in m for marker in _USERNS_MARKERS):
        return Reason.USER_NAMESPACE_UNAVAILABLE
    if "can't find source path" in m:
        return Reason.BIND_SOURCE_MISSING
    if "can't mount proc" in m or "mount proc" in m:
        return Reason.PROC_MOUNT_FAILED
    if "make / slave" in m or "mount namespace" in m:
        return Reason.MOUNT_NAMESPACE_UNAVAILABLE
    return Reason.BWRAP_PROBE_FAILED


def probe_failed(result: _probe.ProbeResult) -> str | None:
    """bwrap's error line if the probe's setup failed, else None (the command ran, or
    exec failed after a complete setup: ``bwrap: execvp ...``)."""
    errors = [ln.strip() for ln in result.stderr.splitlines() if ln.strip().startswith("bwrap:")]
    if errors and not errors[-1].startswith("bwrap: execvp"):
        return errors[-1]
    if result.returncode < 0:
        return result.message or f"bwrap killed by signal {-result.returncode}"
    return None


# ---------------------------------------------------------------- the backend

@dataclass
class BwrapChild:
    """A running bwrap. ``pid``: bwrap itself; ``sandbox_pid``: the first process inside
    the new namespaces (our init, or the command with ``as_pid_1``), from ``--info-fd``.

    With our init (``status_fd`` >= 0): the command's wait status comes from the init's
    status pipe, which only the init holds; killing the init (pid 1) SIGKILLs the whole
    pid namespace, and the init forwards the other signals to the command."""

    pid: int
    sandbox_pid: int | None = None
    as_pid_1: bool = False
    _popen: object = None
    status_fd: int = -1
    pidfd: int = -1

    def returncode(self, wait_status: int) -> int:
        """The command's returncode (-N for signal N, as native): the init's report;
        without one (the init was killed, or no init) bwrap's own status."""
        fd = self.status_fd
        if fd >= 0:
            try:
                data = os.read(fd, 4)
            except OSError:
                data = b""
            if len(data) == 4:
                return os.waitstatus_to_exitcode(int.from_bytes(data, "little"))
        return os.waitstatus_to_exitcode(wait_status)

    def forward_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the command: through our init, which forwards it; without
        an init to the command itself (bwrap's pid 1 does not forward signals); when
        that is gone, to bwrap, whose death takes the sandbox with it."""
        if self.status_fd >= 0:
            if self._signal_pid1(sig):
                return
            target = None
        else:
            target = self.sandbox_pid if self.as_pid_1 else _first_child(self.sandbox_pid)
        for pid in ((target, self.pid) if target else (self.pid,)):
            try:
                os.kill(pid, sig)
                return
            except ProcessLookupError:
                continue

    def kill_sandbox(self) -> None:
        """SIGKILL the sandbox's pid 1 (its death kills every process of its pid
        namespace), whatever the command did to its own PR_SET_PDEATHSIG; the caller
        kills bwrap too."""
        self._signal_pid1(9)

    def _signal_pid1(self, sig: int) -> bool:
        if self.pidfd < 0:
            return False
        import signal as _signal
        try:
            _signal.pidfd_send_signal(self.pidfd, sig)
            return True
        except ProcessLookupError:
            return False

    def close(self) -> None:
        """Called once bwrap was reaped. Its pid 1 is gone then, unless bwrap itself was
        killed before that pid 1 bound itself to bwrap's life: SIGKILL it (by pidfd:
        never another process) so nothing outlives bwrap."""
        self._popen = None
        self._signal_pid1(9)
        for name in ("status_fd", "pidfd"):
            fd = getattr(self, name)
            setattr(self, name, -1)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _pid1_fd(child_pid: int, bwrap_pid: int) -> int:
    """A pidfd of bwrap's child (pid 1 of the sandbox), checked to be bwrap's child (not
    a reused pid); -1 if it is gone already."""
    try:
        fd = os.pidfd_open(child_pid)
    except OSError:
        return -1
    try:
        with open(f"/proc/{child_pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if ppid != bwrap_pid:
        os.close(fd)
        return -1
    return fd


# Words on our init's status pipe (native/psb_bwrap_init.c).
INIT_STARTED = 0x50534201
INIT_FAILED = 0x50534202
_INIT_FAILURES = {1: "usage", 2: "mount namespace", 3: "procfs read-only remount", 4: "bind check",
                  5: "capabilities", 6: "seccomp", 7: "exec", 8: "fork", 9: "lifeline"}


def _read_words(fd: int, count: int, timeout: float) -> list[int]:
    """Up to ``count`` 4-byte words from ``fd`` (fewer at EOF or timeout)."""
    import select
    import time
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


def _first_child(pid: int | None) -> int | None:
    """The oldest child of ``pid`` (the command, for bwrap's pid 1), or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except (OSError, ValueError):
        return None
    best = None
    for kid in kids:
        try:
            with open(f"/proc/{kid}/stat") as f:
                start = int(f.read().rsplit(")", 1)[1].split()[19])
        except (OSError, ValueError, IndexError):
            continue
        if best is None or start < best[0]:
            best = (start, kid)
    return best[1] if best else None


# ---------------------------------------------------------------- starting bwrap

PR_SET_PDEATHSIG = 1
INFO_TIMEOUT = 60.0
_libc = None


def _pdeathsig_preexec(parent_pid: int):
    """In the forked child, before exec: SIGKILL when the spawning thread dies, and exit at
    once if the parent already died (bwrap sets its own PR_SET_PDEATHSIG only after
    clone(): without this a launcher killed during bwrap's start leaves the sandbox)."""
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    prctl = _libc.prctl

    def preexec():
        if prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0) != 0 or os.getppid() != parent_pid:
            os._exit(127)
    return preexec


class _Spawner:
    """One long-lived thread forks every bwrap. PR_SET_PDEATHSIG follows the *thread*
    that forked, so a sandbox started from a short-lived thread (a pool worker) would
    die with it; this thread lives as long as the process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._thread = None
        self._queue = None

    def call(self, fn):
        import queue
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._loop, args=(self._queue,),
                                                name="pysandbox-bwrap-spawner", daemon=True)
                self._thread.start()
            q = self._queue
        box: dict = {}
        done = threading.Event()
        q.put((fn, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["result"]

    @staticmethod
    def _loop(q):
        while True:
            fn, box, done = q.get()
            try:
                box["result"] = fn()
            except BaseException as exc:   # handed to the caller's thread
                box["error"] = exc
            finally:
                done.set()


_spawner = _Spawner()


def _wait_for_exec(child: BwrapChild, bwrap_path: str, timeout: float = INFO_TIMEOUT) -> int | None:
    """Return once the command runs (its /proc/PID/exe is no longer bwrap) or bwrap ended.

    Returns None when the command was seen running, else bwrap's exit status if it
    ended first (None if it was killed or the wait timed out).

    bwrap's pid 1 binds itself to bwrap's life (PR_SET_PDEATHSIG) only after its setup;
    a launcher killed before that would leave the sandbox running. By the time the
    command is executed that is done. bwrap is never reaped here (WNOWAIT).
    """
    import time
    start = time.monotonic()
    deadline = start + timeout
    pause = 0.0002
    while time.monotonic() < deadline:
        target = child.sandbox_pid if child.as_pid_1 else _first_child(child.sandbox_pid)
        if target is not None:
            try:
                if os.readlink(f"/proc/{target}/exe") != bwrap_path:
                    return
            except OSError:
                pass   # not there yet, or not readable before exec (bwrap is not dumpable)
        try:
            ended = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if ended is not None:   # a fast command, or a setup failure after the probe
            return ended.si_status if ended.si_code == os.CLD_EXITED else None
        time.sleep(pause)
        # 1 ms steps while a typical setup lasts (a coarser step adds its length to every
        # launch), 5 ms once the setup is a long one (hundreds of binds): fewer wake-ups
        pause = min(pause * 2, 0.001 if time.monotonic() - start < 0.05 else 0.005)
    return None


def _read_info(fd: int, timeout: float = INFO_TIMEOUT) -> bytes:
    """Read ``--info-fd`` until bwrap closes it (right after its own PR_SET_PDEATHSIG)."""
    import select
    import time
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return data
        chunk = os.read(fd, 4096)
        if not chunk:
            return data
        data += chunk


class BwrapBackend:
    """Run plans through bubblewrap. See the module docstring for the rules.

    ``bwrap``: the bwrap to use (else ``$PYSANDBOX_BWRAP``, else ``PATH``).
    ``allow_setuid``: accept a setuid/setgid bwrap (also ``PYSANDBOX_ALLOW_SETUID_BWRAP=1``).
    """

    name = "bwrap"

    def __init__(self, bwrap: str | None = None, *, allow_setuid: bool = False):
        self._explicit = os.fspath(bwrap) if bwrap is not None else None
        self._allow_setuid = allow_setuid
        self._lock = threading.Lock()
        self._checked: dict = {}
        self._status: dict = {}

    # -- locating ---------------------------------------------------------------------

    def info(self, writable=()) -> _probe.BwrapInfo:
        """The bwrap this backend would run for a sandbox that can write the host paths
        ``writable`` (``Plan.writable_paths``): located, setuid-checked, probed.

        Raises:
            BwrapNotFound, SetuidRejected, BackendUnavailable (bwrap_in_writable_path),
            BwrapProbeFailed: as the names say.
        """
        path = _probe.locate_bwrap(self._explicit, writable=writable)
        _probe.check_setuid(path, _probe.setuid_allowed(self._allow_setuid))
        return _probe.bwrap_info(path)

    # -- check ------------------------------------------------------------------------

    def check(self, plan: P.Plan) -> _probe.BwrapInfo:
        """Raise the typed error if ``plan`` cannot run through bwrap here; else return
        the located bwrap's info (so a launch locates it once).

        Probes ``bwrap ARGS -- true`` with the plan's own arguments, without and then
        with ``--unshare-net``; cached per (bwrap, plan) for the process.

        Raises:
            NetworkModeUnsupported, BwrapNotFound, SetuidRejected, BwrapOptionUnsupported,
            BwrapProbeFailed, BackendUnavailable, CapabilityUnavailable (user, network
            namespace, loopback, proc): the first thing that fails.
        """
        from . import check_network_mode
        check_network_mode(plan.network)
        info = self.info(plan.writable_paths)
        try:
            key = (info, hash(plan), plan)
        except TypeError:
            key = None
        if key is not None:
            with self._lock:
                got = self._checked.get(key)
            if got is not None:
                if isinstance(got, SandboxError):
                    raise got
                return info
        try:
            self._probe_plan(info, plan)
        except SandboxError as exc:
            if key is not None:
                with self._lock:
                    self._checked[key] = exc
            raise
        if key is not None:
            with self._lock:
                if len(self._checked) > 256:
                    self._checked.clear()
                self._checked[key] = True
        return info

    def _probe_plan(self, info: _probe.BwrapInfo, plan: P.Plan) -> None:
        _check_expressible(plan, info)
        used = options_used(render(plan, lambda data: 0, probe=True)) | {"--args", "--info-fd"}
        missing = sorted(used - info.options)
        if missing:
            raise BwrapOptionUnsupported(
                f"{info.path} (bwrap {info.version or 'unknown version'}) lacks {', '.join(missing)}",
                Reason.BWRAP_OPTION_UNSUPPORTED)
        parts = [False, True] if "net" in plan.namespaces else [False]
        for network_part in parts:
            message = self._probe_once(info, plan, network=network_part)
            if message is not None:
                reason = classify(message, network_part=network_part)
                what = "with --unshare-net" if network_part else "for the filesystem and namespaces"
                raise error_for(reason, f"bwrap probe {what} failed: {message}")

    def _probe_once(self, info, plan, *, network: bool) -> str | None:
        data = _DataFds()
        try:
            options = render(plan, data, network=network, probe=True)
            args_fd = data(_nul_joined(flatten(options)))
            passed = set(data.fds) | {fd for fd in caller_fds(plan) if _is_open(fd)}
            result = _probe.run_probe([info.path, "--args", str(args_fd), "--", "true"],
                                      pass_fds=sorted(passed), env={"PATH": PROBE_PATH})
        except OSError as exc:
            return f"cannot run {info.path}: {exc}"
        finally:
            data.close()
        return probe_failed(result)

    # -- spawn ------------------------------------------------------------------------

    def spawn(self, plan: P.Plan, launch: Launch) -> BwrapChild:
        """Start ``launch.argv`` in the sandbox of ``plan`` through bwrap.

        Raises:
            FileNotFoundError, PermissionError: the command cannot be executed in the
                sandbox's view (checked before bwrap starts).
            SandboxError subclasses: as :meth:`check`.
            OSError: bwrap itself could not be started.
        """
        import subprocess

        # First, with or without our init: a source swapped for a symlink since the policy
        # was built is refused before anything (the bwrap lookup below) follows it.
        binds = bind_identities(plan)
        info = self.check(plan)
        resolved = view.find_executable(launch.argv[0], plan.mount_ops, launch.env, plan.chdir)
        command = list(launch.argv)
        if launch.executable is not None:
            command[0] = launch.executable
        elif "/" not in command[0] and ("PATH" not in launch.env or init_mode(plan) is not None):
            command[0] = resolved   # execvp's default PATH differs from ours; our init does no search
        exe = command[0]
        init = init_mode(plan)
        init_fd = init_program(plan) if init else -1
        data = _DataFds()
        info_r = info_w = status_r = status_w = -1
        try:
            # inside the try: a second pipe failing (EMFILE) must not leak the first
            info_r, info_w = os.pipe()
            if init:
                status_r, status_w = os.pipe()
            options = render(plan, data)
            args_fd = data(_nul_joined(flatten(options)))
            if init:
                command = init_command(plan, init_fd, status_w, data, command[0], list(launch.argv), binds)
            passed = set(data.fds) | caller_fds(plan) | set(launch.pass_fds) | {info_w}
            if init:
                passed |= {status_w} | ({init_fd} if init_fd is not None else set())
            argv = [info.path, "--args", str(args_fd), "--info-fd", str(info_w), "--", *command]
            preexec = _pdeathsig_preexec(os.getpid())
            proc = _spawner.call(lambda: subprocess.Popen(
                argv, stdin=launch.stdin, stdout=launch.stdout, stderr=launch.stderr,
                close_fds=True, pass_fds=tuple(sorted(passed)), env=launch.env, preexec_fn=preexec))
            # The SandboxProcess waits for this pid itself; this Popen must never reap it.
            proc._child_created = False
            os.close(info_w)
            info_w = -1
            if status_w != -1:
                os.close(status_w)   # only our init holds the write end now (and bwrap)
                status_w = -1
            report = _read_info(info_r)
        except BaseException:
            if status_r != -1:
                os.close(status_r)
            raise
        finally:
            data.close()
            for fd in (info_r, info_w, status_w):
                if fd != -1:
                    os.close(fd)
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', report)
        if m is None:
            if status_r != -1:
                os.close(status_r)
            # bwrap stopped before it created the sandbox; its message went to stderr.
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            raise BwrapProbeFailed(f"bwrap exited ({code}) before it created the sandbox; "
                                   f"its message is on the command's stderr", Reason.BWRAP_PROBE_FAILED)
        sandbox_pid = int(m.group(1))
        # sandbox_pid is the command itself unless bwrap runs its own pid 1 (no init of
        # ours, a pid namespace, not as_pid_1): then it is that pid 1's first child
        pid1 = "pid" in plan.namespaces and (plan.as_pid_1 or init == "fork")
        child = BwrapChild(proc.pid, sandbox_pid, plan.as_pid_1 or init is not None, proc,
                           status_fd=status_r, pidfd=_pid1_fd(sandbox_pid, proc.pid) if pid1 else -1)
        if launch.on_start is not None:
            try:
                launch.on_start(child.sandbox_pid)
            except BaseException:
                proc.kill()   # bwrap, our child: its death takes the sandbox with it
                os.waitpid(proc.pid, 0)
                child.close()
                raise
        if init:
            self._wait_for_init(child, proc, info, plan, exe)
        elif _wait_for_exec(child, info.path) == 1:
            self._setup_failed(proc, info, plan)
        return child

    def _setup_failed(self, proc, info, plan) -> None:
        """bwrap exited 1 and the command was never seen running: a setup failure (the
        host changed since the probe) or a very fast command failing. Probe again with
        the same arguments: if setup fails now, say so, typed."""
        with self._lock:
            self._checked.clear()
        try:
            self._probe_plan(info, plan)
        except SandboxError as exc:
            os.waitpid(proc.pid, 0)
            if exc.reason != Reason.BWRAP_PROBE_FAILED:
                raise
            raise SetupError(f"bwrap setup failed at launch: {_message(exc)}", Reason.SETUP_FAILED,
                             stage="bwrap") from exc

    def _wait_for_init(self, child: BwrapChild, proc, info, plan, exe: str) -> None:
        """Return once our init reported the command exec'd; raise the typed error (the
        command never ran) if it reported a setup failure or bwrap ended first."""
        import errno as _errno
        words = _read_words(child.status_fd, 1, INFO_TIMEOUT)
        if words == [INIT_STARTED]:
            if init_mode(plan) == "exec":
                # the command is exec'd in the init's process: its status is bwrap's
                os.close(child.status_fd)
                child.status_fd = -1
            return
        if words == [INIT_FAILED]:
            what, detail = (_read_words(child.status_fd, 2, 5.0) + [0, 0])[:2]
            os.waitpid(proc.pid, 0)
            child.close()
            stage = _INIT_FAILURES.get(what, f"step {what}")
            if what == 7:   # exec
                raise OSError(detail, os.strerror(detail), exe)
            if what == 4:
                raise SetupError("a bind's destination is not the inode the launcher validated (a symlink "
                                 "or another mount was swapped in before bwrap bound it); the command "
                                 "did not run", Reason.BIND_SOURCE_CHANGED, stage="bind", errno=_errno.ELOOP)
            raise SetupError(f"the bwrap backend's init failed at its {stage} step "
                             f"({os.strerror(detail) if what in (2, 5, 6, 8) and detail else detail}); "
                             f"the command did not run", Reason.SETUP_FAILED, stage="init",
                             errno=detail if what in (2, 5, 6, 8) else None)
        # No report: bwrap's setup failed before it exec'd the init (or the init was killed).
        try:
            ended = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            ended = None
        child.close()
        if ended is not None and ended.si_code == os.CLD_EXITED and ended.si_status == 1:
            self._setup_failed(proc, info, plan)
            proc_dest = proc_in_sandbox(plan)
            if init_mode(plan) and proc_dest is not None and not _searchable_parents(proc_dest, plan.mount_ops):
                os.waitpid(proc.pid, 0)
                raise BackendUnavailable(
                    f"bwrap could not exec the backend's init through {proc_dest}/self/fd: a directory above "
                    f"{proc_dest} is one bwrap made itself (mode 0700, for its setup's uid), which the "
                    f"sandbox's uid may not enter; the command did not run. Mount the procfs at /proc, or "
                    f"create its parents with Dir(), or use the native backend", Reason.BWRAP_INIT_UNAVAILABLE)
        os.waitpid(proc.pid, 0)
        how = "" if ended is None else (f" (exit {ended.si_status})" if ended.si_code == os.CLD_EXITED
                                        else f" (signal {ended.si_status})")
        raise SetupError(f"bwrap ended{how} before its init reported the command started; its message is "
                         "on the command's stderr", Reason.SETUP_FAILED, stage="bwrap")

    # -- status -----------------------------------------------------------------------

    def status(self, policy=None) -> BackendStatus:
        """What works through bwrap here: per capability and per network mode.

        ``policy`` defaults to ``Policy.default()``. Cached per (bwrap, policy).

        Raises:
            PolicyError: ``policy`` does not compile.
        """
        from ..policy import Policy
        if policy is None:
            policy = Policy.default()
        try:
            info = self.info(P.writable_host_paths(policy))
        except SandboxError as exc:
            return _unavailable(exc, policy)
        key = (info, policy)
        with self._lock:
            got = self._status.get(key)
        if got is not None:
            return got
        caps = self._capabilities(info)
        network = {}
        for mode in ("deny", "allow", "proxy"):
            if mode == "proxy":
                network[mode] = CapabilityStatus(mode, False, Reason.NETWORK_MODE_UNSUPPORTED.value,
                                                 "network mode 'proxy' is not built yet")
                continue
            variant = policy if policy.network.mode == mode else policy.replace(network=Network(mode))
            try:
                self.check(P.compile(variant))
                network[mode] = CapabilityStatus(mode, True)
            except SandboxError as exc:
                network[mode] = CapabilityStatus(mode, False, exc.reason.value, _message(exc))
        own = network[policy.network.mode]
        try:
            init_memfd()
            init_state = "psb-bwrap-init"
        except SandboxError as exc:
            # the Python fallback runs where this interpreter is visible in the sandbox
            init_state = f"python (psb-bwrap-init unavailable: {exc.reason.value})"
        result = BackendStatus("bwrap", own.available, own.reason, own.detail, caps, network,
                               {"path": info.path, "version": info.version, "setuid": info.setuid,
                                # pid 1 with a pid namespace (not as_pid_1): our init, or why not
                                "init": init_state,
                                # as_pid_1: the command is pid 1 and may clear its own
                                # PR_SET_PDEATHSIG: kill() still ends it (SIGKILL to pid 1),
                                # a SIGKILLed launcher does not (README "Lifetime")
                                "as_pid_1_lifetime": "command-controlled"})
        with self._lock:
            self._status[key] = result
        return result

    def _capabilities(self, info) -> list[CapabilityStatus]:
        base = ["--unshare-user", "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/"]
        trials = {
            "user": (base, False),
            "mount": (base + ["--tmpfs", "/tmp"], False),
            "pid": (base + ["--unshare-pid"], False),
            "proc": (base + ["--unshare-pid", "--proc", "/proc"], False),
            "net": (base + ["--unshare-net"], True),
        }
        caps = []
        for name, (args, network_part) in trials.items():
            try:
                result = _probe.run_probe([info.path, *args, "--", "true"], env={"PATH": PROBE_PATH})
                message = probe_failed(result)
            except OSError as exc:
                message = f"cannot run {info.path}: {exc}"
            if message is None:
                caps.append(CapabilityStatus(name, True))
                if name == "net":
                    caps.append(CapabilityStatus("loopback", True))
                continue
            reason = classify(message, network_part=network_part)
            if name == "proc" and reason == Reason.BWRAP_PROBE_FAILED:
                reason = Reason.PROC_MOUNT_FAILED
            if name == "pid" and reason in (Reason.BWRAP_PROBE_FAILED, Reason.USER_NAMESPACE_UNAVAILABLE) \
                    and caps and caps[0].available:
                reason = Reason.PID_NAMESPACE_UNAVAILABLE
            if name == "net":
                if reason == Reason.LOOPBACK_SETUP_FAILED:
                    caps.append(CapabilityStatus("net", True))
                    caps.append(CapabilityStatus("loopback", False, reason.value, message))
                else:
                    caps.append(CapabilityStatus("net", False, reason.value, message))
                    caps.append(CapabilityStatus("loopback", False, reason.value,
                                                 "no network namespace to set up loopback in"))
                continue
            caps.append(CapabilityStatus(name, False, reason.value, message))
        return caps


def _check_expressible(plan: P.Plan, info) -> None:
    """Refuse what bwrap cannot do faithfully, rather than run something weaker.

    Raises:
        BwrapOptionUnsupported: block_fd, userns_block_fd or a namespace to join; a read-only device bind (bwrap has no read-only
            ``--dev-bind``; ``--remount-ro`` is not recursive, submounts stay writable).
        PolicyError: one descriptor feeds two files (bwrap closes it after the first).
    """
    waits = (("block_fd", "--block-fd", plan.first(P.WaitFd)),
             ("userns_block_fd", "--userns-block-fd", plan.idmap.block_fd))
    for name, option, given in waits:
        if given is not None:
            raise BwrapOptionUnsupported(
                f"the bwrap backend cannot honour {name}: its launch waits for the command's exec "
                f"(bwrap's {option} would stall it); use the native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
    join, enter2 = plan.first(P.JoinNamespaces), plan.first(P.EnterUserns2)
    joined = (("userns_fd", join and join.userns_fd), ("pidns_fd", join and join.pidns_fd),
              ("userns2_fd", enter2 and enter2.fd))
    for name, given in joined:
        if given is not None:
            raise BwrapOptionUnsupported(
                f"the bwrap backend cannot honour {name}: bwrap joins given namespaces only without "
                f"--unshare-user (or from its setuid parent), which this backend always passes; use the "
                f"native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
    seen = set()
    for op in plan.mount_ops:
        if isinstance(op, P.BindMount) and op.dev and op.readonly:
            raise BwrapOptionUnsupported(
                f"bwrap {info.version or ''} cannot bind {op.dest} read-only with devices: it has no "
                f"read-only --dev-bind and --remount-ro leaves submounts writable; use dev=False or "
                f"the native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
        if isinstance(op, P.WriteFile) and op.fd is not None:
            if op.fd in seen:
                raise PolicyError(f"descriptor {op.fd} feeds two files; bwrap reads and closes it after "
                                  f"the first", Reason.CONFLICTING_OPTIONS, op.fd)
            seen.add(op.fd)


def _unavailable(exc: SandboxError, policy) -> BackendStatus:
    reason, detail = exc.reason.value, _message(exc)
    caps = [CapabilityStatus(n, False, reason, detail) for n in ("user", "mount", "pid", "proc", "net", "loopback")]
    network = {m: CapabilityStatus(m, False, reason, detail) for m in ("deny", "allow")}
    network["proxy"] = CapabilityStatus("proxy", False, Reason.NETWORK_MODE_UNSUPPORTED.value,
                                        "network mode 'proxy' is not built yet")
    return BackendStatus("bwrap", False, reason, detail, caps, network, {})


def _message(exc: BaseException) -> str:
    return exc.args[0] if getattr(exc, "args", None) else str(exc)


def _nul_joined(words: list[str]) -> bytes:
    return b"".join(w.encode() + b"\0" for w in words)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
