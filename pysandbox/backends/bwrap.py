"""The bubblewrap backend: a Plan rendered as a bwrap command line.

Which bwrap: the constructor's ``bwrap`` argument, then ``$PYSANDBOX_BWRAP``, then
``PATH`` (no built-in fallback), symlinks resolved, never one inside a path the
policy makes writable. A setuid/setgid bwrap is refused (``bwrap_setuid_rejected``)
unless the caller opts in with ``BwrapBackend(allow_setuid=True)`` or
``PYSANDBOX_ALLOW_SETUID_BWRAP=1``. An option the installed bwrap lacks
(``--help`` is parsed) is an error (``bwrap_option_unsupported``), never dropped.

Every launch has ``--unshare-user``, ``--cap-drop ALL`` (then ``--cap-add`` for the
kept ones) and ``--die-with-parent``. The options travel NUL-separated through a
memfd (``--args FD``), file data and seccomp programs through memfds; bwrap reads
and closes them, and it is started with only stdio, those descriptors and the
caller's ``pass_fds``, so nothing else reaches the command.

Setup failures: bwrap reports them as exit 1 on the command's stderr, which would
look like the command's own status. So before the first launch of a plan,
``check(plan)`` runs ``bwrap ARGS -- true`` with the plan's exact arguments, once
without and once with ``--unshare-net``, and maps bwrap's message to a reason code;
the result is cached per plan for the life of the process.

Lifetime: bwrap is forked by one long-lived spawner thread with PR_SET_PDEATHSIG set
before exec, so the sandbox dies with the launching process, not with the thread that
called Popen; spawn returns once bwrap reported the sandbox (``--info-fd``) and the
command was executed. If bwrap ends with exit 1 before that, the plan is probed again
and a setup failure raises a typed error. ``BwrapChild.forward_signal`` signals the
command itself (bwrap's pid 1 does not forward signals). Known gap: bwrap 0.8 binds
its pid 1 to its own life late in setup; a launcher SIGKILLed in those milliseconds
can leave the sandbox running.

Differences from the native backend: a command killed by signal N is reported as
returncode 128+N (bwrap's pid 1 turns the signal into an exit status), where native
reports -N. ``Policy.argv0`` needs bwrap >= 0.9 (``--argv0``).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass

from .. import probe as _probe
from ..errors import (BwrapOptionUnsupported, BwrapProbeFailed, PolicyError, Reason, SandboxError,
                      SetupError, error_for)
from .. import plan as P
from ..policy import Bind, Network, Overlay
from .base import BackendStatus, CapabilityStatus, Launch

PROBE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NAMESPACE_OPTIONS = (("user", "--unshare-user"), ("pid", "--unshare-pid"), ("ipc", "--unshare-ipc"),
                      ("uts", "--unshare-uts"), ("cgroup", "--unshare-cgroup"), ("net", "--unshare-net"))


# ---------------------------------------------------------------- rendering

def _octal(mode: int) -> str:
    return format(mode, "04o")


def render(plan: P.Plan, data_fd, *, network: bool = True, probe: bool = False) -> list[tuple]:
    """The bwrap options for ``plan``, as a list of ``(option, *values)`` tuples.

    ``data_fd(bytes) -> int`` stores file contents and seccomp programs and returns the
    descriptor bwrap reads them from. ``network=False`` leaves out ``--unshare-net``
    (the filesystem half of a probe). ``probe=True`` replaces the caller's data
    descriptors (``File(fd=...)``) with empty data, so a probe consumes nothing.

    Raises:
        PolicyError: an op this renderer does not know (a bug, not user input).
    """
    policy = plan.policy
    out: list[tuple] = []
    namespaces = plan.namespaces
    for name, option in _NAMESPACE_OPTIONS:
        if name in namespaces and (name != "net" or network):
            out.append((option,))
    idmap = plan.idmap
    out.append(("--uid", str(idmap.uid)))
    out.append(("--gid", str(idmap.gid)))
    # Always, whatever policy.die_with_parent says: invariant 4 of DESIGN.md.
    out.append(("--die-with-parent",))
    if policy.as_pid_1:
        out.append(("--as-pid-1",))
    if policy.argv0 is not None:
        out.append(("--argv0", policy.argv0))
    done: list = []
    for op in plan.ops:
        if isinstance(op, P.SetHostname):
            out.append(("--hostname", op.name))
        elif isinstance(op, P.DisableUserns):
            out.append(("--disable-userns",))
        elif isinstance(op, P.DropCapabilities):
            out.append(("--cap-drop", "ALL"))
            for cap in sorted(op.keep):
                out.append(("--cap-add", "CAP_" + cap.upper()))
        elif isinstance(op, P.Seccomp):
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
    """A running bwrap. ``pid``: bwrap itself (killing it kills the sandbox: every process
    in it has PR_SET_PDEATHSIG); ``sandbox_pid``: the first process inside the new
    namespaces (bwrap's pid 1, or the command with ``as_pid_1``), from ``--info-fd``."""

    pid: int
    sandbox_pid: int | None = None
    as_pid_1: bool = False
    _popen: object = None

    def returncode(self, wait_status: int) -> int:
        return os.waitstatus_to_exitcode(wait_status)

    def forward_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the command (bwrap's pid 1 does not forward signals); when the
        command is gone, to bwrap, whose death takes the sandbox with it."""
        target = self.sandbox_pid if self.as_pid_1 else _first_child(self.sandbox_pid)
        for pid in ((target, self.pid) if target else (self.pid,)):
            try:
                os.kill(pid, sig)
                return
            except ProcessLookupError:
                continue

    def close(self) -> None:
        self._popen = None


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

    def info(self, policy=None) -> _probe.BwrapInfo:
        """The bwrap this backend would run for ``policy``: located, setuid-checked, probed.

        Raises:
            BwrapNotFound, SetuidRejected, BackendUnavailable (bwrap_in_writable_path),
            BwrapProbeFailed: as the names say.
        """
        writable = _writable_host_paths(policy) if policy is not None else ()
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
        check_network_mode(plan.policy)
        info = self.info(plan.policy)
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

        from ..process import find_executable
        info = self.check(plan)
        resolved = find_executable(plan, launch.argv[0], launch.env)
        command = list(launch.argv)
        if launch.executable is not None:
            command[0] = launch.executable
        elif "/" not in command[0] and "PATH" not in launch.env:
            command[0] = resolved   # execvp's default PATH differs from ours: be exact
        data = _DataFds()
        info_r, info_w = os.pipe()
        try:
            options = render(plan, data)
            args_fd = data(_nul_joined(flatten(options)))
            passed = set(data.fds) | caller_fds(plan) | set(launch.pass_fds) | {info_w}
            argv = [info.path, "--args", str(args_fd), "--info-fd", str(info_w), "--", *command]
            preexec = _pdeathsig_preexec(os.getpid())
            proc = _spawner.call(lambda: subprocess.Popen(
                argv, stdin=launch.stdin, stdout=launch.stdout, stderr=launch.stderr,
                close_fds=True, pass_fds=tuple(sorted(passed)), env=launch.env, preexec_fn=preexec))
            # The SandboxProcess waits for this pid itself; this Popen must never reap it.
            proc._child_created = False
            os.close(info_w)
            info_w = -1
            report = _read_info(info_r)
        finally:
            data.close()
            for fd in (info_r, info_w):
                if fd != -1:
                    os.close(fd)
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', report)
        if m is None:
            # bwrap stopped before it created the sandbox; its message went to stderr.
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            raise BwrapProbeFailed(f"bwrap exited ({code}) before it created the sandbox; "
                                   f"its message is on the command's stderr", Reason.BWRAP_PROBE_FAILED)
        child = BwrapChild(proc.pid, int(m.group(1)), plan.policy.as_pid_1, proc)
        if launch.on_start is not None:
            try:
                launch.on_start(child.sandbox_pid)
            except BaseException:
                proc.kill()   # bwrap, our child: its death takes the sandbox with it
                os.waitpid(proc.pid, 0)
                raise
        if _wait_for_exec(child, info.path) == 1:
            # bwrap exited 1 and the command was never seen running: a setup failure
            # (the host changed since the probe) or a very fast command failing. Probe
            # again with the same arguments: if setup fails now, say so, typed.
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
        return child

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
            info = self.info(policy)
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
        result = BackendStatus("bwrap", own.available, own.reason, own.detail, caps, network,
                               {"path": info.path, "version": info.version, "setuid": info.setuid})
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
    policy = plan.policy
    for name, option in (("block_fd", "--block-fd"), ("userns_block_fd", "--userns-block-fd")):
        if getattr(policy, name) is not None:
            raise BwrapOptionUnsupported(
                f"the bwrap backend cannot honour {name}: its launch waits for the command's exec "
                f"(bwrap's {option} would stall it); use the native backend", Reason.BWRAP_OPTION_UNSUPPORTED)
    for name in ("userns_fd", "pidns_fd", "userns2_fd"):
        if getattr(policy, name) is not None:
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


def _writable_host_paths(policy) -> list[str]:
    """Host paths the sandbox can write: rw bind sources, overlay upper (and work)
    directories, and their sandbox paths."""
    paths = []
    for op in policy.fs:
        if isinstance(op, Bind) and op.src is not None and not op.readonly:
            paths.append(op.src)
        elif isinstance(op, Overlay) and op.writable:
            paths += [op.upper, op.work]
    paths.extend(policy.writable_paths)
    return paths


def _nul_joined(words: list[str]) -> bytes:
    return b"".join(w.encode() + b"\0" for w in words)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
