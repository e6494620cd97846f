"""The native backend: :class:`NativeBackend` runs a plan with the cffi executor.

Per plan (once, cached): :mod:`.native_translate` turns the Plan into a flat op array
(:mod:`.native_ops`), given the host facts of :mod:`.native_host`. Per launch only argv,
envp and stdio are filled in. The C child (``native/psb_child.c``) walks the array after
``clone``: no Python, no malloc. A failed step sends ``{stage, op index, errno}``
through a close-on-exec pipe; :mod:`.native_errors` maps it, in one table, to the typed
error naming the plan step and the path. EOF on the pipe means the command was
executed. Probing (``status``) is :mod:`pysandbox.backends.native.probe`.

Processes: the setup child is cloned into the new namespaces and, where it can,
shares the caller's memory (CLONE_VM, no page-table copy) until it execs. With a pid
namespace it becomes pid 1: it clones the command's process and then execs the
freestanding init of ``native/psb_init.c`` (embedded at build time, exec'd from a
sealed execute-only memfd), so no sandbox process keeps the caller's memory; the
command waits for that exec before running anything. Where the init cannot be exec'd
(``PYSANDBOX_NATIVE_NO_EXEC_INIT=1``, memfd exec forbidden), the init is a private
copy of the caller (fork mode, slower, made undumpable). Clones happen on the main
thread or on persistent launcher threads, because PR_SET_PDEATHSIG follows the
cloning thread: die-with-parent then means the process.
"""

from __future__ import annotations

import os
import sys
import _weakref
import _thread

from ... import plan as P
from ...execpath import exec_candidates
from ..base import BackendStatus, Launch, pack_winsize
# The cffi module: one loader, its ABI checked at load.
from .. import landlock, monitor
from .._native_lib import (FORWARDED_SIGNAL_MASK, NO_EXEC_INIT_ENV, load_module,  # noqa: F401
                          has_mount_setattr, init_fd)
from .native_host import read_host, read_mountpoints  # noqa: F401  (re-exported)
# The op array's names, re-exported: the tests and the module loader read them here.
from ..native_ops import (CLONE_FLAGS, F_BIND, F_CURRENT_IDS, F_DEV, F_IF_WRITABLE, F_LIFELINE,  # noqa: F401
                         F_MODE, F_NO_AMBIENT, F_NO_RAISE, F_NOFOLLOW, F_OPTIONAL, F_RO, F_USERNS_FDS, MS_NODEV, MS_NOEXEC,
                         MS_NOSUID, OP, OP_KINDS, PROBE_IDMAP, PROC_RO, STAGE_CLONE, STAGE_EXEC, STAGE_FDS,
                         STAGE_OP, STAGE_PARENT_DIED, COp, Compiled, submount_list, pack, parent_mode)
from .native_translate import translate
from ...trace import clock, debug_logger, ms


NO_MOUNT_SETATTR_ENV = "PYSANDBOX_NATIVE_NO_MOUNT_SETATTR"
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

# ---------------------------------------------------------------- the backend

class NativeChild:
    """The launched sandbox: ``pid`` is its outermost process (pid 1 of its pid
    namespace, or the command itself with as_pid_1, whose lifetime ``monitor`` holds,
    :mod:`.monitor`). ``mntns_fd``: the launcher's reference to the sandbox's mount
    namespace (native/psb_nsref.c), dropped on the executor's closer thread by close()."""

    def __init__(self, pid: int, status_fd: int, monitor: monitor.Monitor | None = None,
                 mntns_fd: int = -1):
        self.pid = pid
        self._status_fd = status_fd
        self.monitor = monitor
        self._mntns_fd = mntns_fd
        if mntns_fd >= 0:
            _hold(self)

    def _drop_in_fork(self) -> None:
        """In a fork of the launcher (no exec): its copy of the reference is closed here,
        so a long-lived fork (a multiprocessing worker) never keeps the namespace alive."""
        fd, self._mntns_fd = self._mntns_fd, -1
        if fd >= 0:
            os.close(fd)

    def returncode(self, wait_status: int) -> int:
        """The command's returncode: the init reports the command's raw wait status
        on the status pipe (a pid 1 cannot die of most signals); without a report
        (the init itself was killed) the init's own status counts."""
        fd = self._status_fd
        if fd >= 0:
            try:
                data = os.read(fd, 4)
            except (BlockingIOError, OSError):
                data = b""
            if len(data) == 4:
                return os.waitstatus_to_exitcode(int.from_bytes(data, "little", signed=True))
        return os.waitstatus_to_exitcode(wait_status)

    def forward_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the command: to ``pid``, our init, which forwards it (or the
        command itself with as_pid_1)."""
        os.kill(self.pid, sig)

    def kill_sandbox(self) -> None:
        """Nothing beyond SIGKILL to ``pid`` (the caller sends it): our init is pid 1, a
        separate process the command cannot make outlive the launcher; with as_pid_1 the
        monitor holds the command's lifetime."""

    def close(self) -> None:
        """Called once ``pid`` was reaped (or the launch abandoned): the status pipe
        closed, the monitor (as_pid_1) ended and reaped; the sandbox's unmounts happen
        on the closer thread, not here."""
        fd, self._status_fd = self._status_fd, -1
        if fd >= 0:
            os.close(fd)
        fd, self._mntns_fd = self._mntns_fd, -1
        if fd >= 0:
            load_module()[1].psb_close_later(fd)
        if self.monitor is not None:
            self.monitor.end()


# The children holding a reference, weakly (a weakref.WeakSet without importing weakref,
# _weakrefset and types: ~0.4 ms of a launch, issue 28): id -> weak reference, removed
# when the child is collected.
_holding: dict[int, _weakref.ReferenceType[NativeChild]] = {}


def _hold(child: NativeChild) -> None:
    key = id(child)

    def forget(_ref: object) -> None:
        _holding.pop(key, None)
    _holding[key] = _weakref.ref(child, forget)


def _drop_references_in_fork() -> None:
    for ref in list(_holding.values()):
        child = ref()
        if child is not None:
            child._drop_in_fork()


os.register_at_fork(after_in_child=_drop_references_in_fork)


class _Ready:
    """A compiled plan turned into cffi structures (kept alive together)."""

    def __init__(self, ffi, compiled: Compiled, exec_init: int = -1):
        self.compiled = compiled
        self.exec_init = exec_init
        n = len(compiled.ops)
        self.ops = ffi.new("struct psb_op[]", max(n, 1))
        for i, (op, (a, b, c, d)) in enumerate(zip(compiled.ops, compiled.offsets)):
            o = self.ops[i]
            o.kind = OP[op.kind]
            o.flags = op.flags
            o.a, o.b, o.c, o.d = a, b, c, d
            o.n, o.m, o.mode = op.n, op.m, op.mode
        self.strtab = ffi.new("char[]", compiled.strtab)
        self.plan = ffi.new("struct psb_plan *")
        self.plan.ops = self.ops
        self.plan.nops = n
        self.plan.strtab = self.strtab
        self.plan.clone_flags = compiled.clone_flags
        self.plan.no_mount_setattr = int(compiled.no_mount_setattr)
        # Exec-init mode only makes sense with an init (pid namespace, not as_pid_1).
        self.plan.init_fd = exec_init if compiled.want_status else -1
        # Without an init the setup child execs the command itself: it may share our
        # memory until then (unless fork mode is forced).
        forced_fork = os.environ.get(NO_EXEC_INIT_ENV) == "1"
        self.plan.share_memory = int(exec_init >= 0 if compiled.want_status else not forced_fork)


def _spawn_reporting(lib, plan, launch, res, on_start) -> int:
    """psb_spawn, with ``on_start(pid)`` called on a helper thread as soon as the child
    exists (the executor writes its pid to a pipe right after the clone, or after the
    last hop). The setup waits until ``on_start`` has returned (a byte on the release
    pipe), so what it reads of the child (its namespaces) is there even for a command
    that exits at once, as bwrap's parent reads them before releasing its child. An
    exception from ``on_start`` kills the child instead and is raised once psb_spawn
    returns."""
    r, w = os.pipe2(os.O_CLOEXEC)
    release_r, release_w = os.pipe2(os.O_CLOEXEC)
    failed: list = []
    started: list = []

    def report():
        data = b""
        while len(data) < 4:
            chunk = os.read(r, 4 - len(data))
            if not chunk:
                return
            data += chunk
        pid = int.from_bytes(data, "little", signed=True)
        started.append(pid)
        try:
            on_start(pid)
            os.write(release_w, b"\0")
        except BaseException as exc:   # noqa: BLE001 - re-raised in the launching thread
            failed.append(exc)
            try:
                os.kill(pid, 9)   # our own child, not yet reaped: the pid is still ours
            except ProcessLookupError:
                pass

    import threading   # here: a launch without on_start does not import it (issue 28)
    reader = threading.Thread(target=report, name="pysandbox-on-start", daemon=True)
    reader.start()
    launch.started_fd, launch.release_fd = w, release_r
    try:
        rc = lib.psb_spawn(plan, launch, res)
    finally:
        os.close(w)
        reader.join()
        for fd in (r, release_r, release_w):
            os.close(fd)
    if failed:
        if rc == 0:
            os.waitpid(res.pid, 0)
            for fd in (res.status_fd, res.mntns_fd):
                if fd >= 0:
                    os.close(fd)
            if res.monitor_pid > 0:
                monitor.Monitor(res.monitor_pid, res.monitor_fd).end()
        raise failed[0]
    return rc


def drain_closes() -> None:
    """Block until every mount namespace reference a reaped sandbox handed to the closer
    thread is dropped (native/psb_nsref.c): for tests and benchmarks that count this
    process's descriptors."""
    load_module()[1].psb_close_drain()


def _fs_encode(text: str) -> bytes:
    """``text`` as os.fsencode encodes it; the encoding goes character by character, so
    encoding a joined text gives the joined bytes."""
    return text.encode(_FS_ENCODING, _FS_ERRORS)


def _placing(procs_files, on_start):
    """``on_start``, after the sandbox's first process was written into each of
    ``procs_files`` (its cgroups), before any step of its setup runs."""
    if not procs_files:
        return on_start

    def place(pid: int) -> None:
        from ...cgroup import place_pid
        place_pid(procs_files, pid)
        if on_start is not None:
            on_start(pid)
    return place


class NativeBackend:
    """Runs plans with the cffi executor. One instance per process (get_backend)."""

    name = "native"

    def __init__(self):
        self._ready: dict = {}
        self._checked: dict = {}
        self._lock = _thread.allocate_lock()   # threading.Lock (threading: only for on_start's reader)

    # -- per plan -------------------------------------------------------------------

    def _prepare(self, plan) -> _Ready:
        fallback = os.environ.get(NO_MOUNT_SETATTR_ENV) == "1"
        exec_init = init_fd()
        landlock_abi = landlock.abi()
        key = (plan, fallback, exec_init, os.environ.get(NO_EXEC_INIT_ENV) == "1", landlock_abi)
        with self._lock:
            ready = self._ready.get(key)
        if ready is not None:
            return ready
        ffi, lib = load_module()
        if not fallback and not has_mount_setattr():
            fallback = True
        ops = translate(plan, read_host(fallback, landlock_abi))
        ready = _Ready(ffi, pack(plan, ops, fallback=fallback), exec_init)
        with self._lock:
            if len(self._ready) > 256:
                self._ready.clear()
            self._ready[key] = ready
        return ready

    def check(self, plan, probe: bool = True) -> None:
        """Raise the typed error if this backend cannot run ``plan`` here. Cached per
        set of namespaces for the life of the process (one throwaway clone).
        ``probe=False`` (a launch that defers the probe, backends/__init__.py): the module
        loaded and the plan translated, and an answer already known for these namespaces
        raised, but no clone: the launch itself shows what the probe would
        (:meth:`spawn` marks such a failure ``before_command``).

        Raises:
            NativeModuleMissing: pysandbox._native cannot be imported.
            UserNamespaceUnavailable, CapabilityUnavailable, NetworkNamespaceUnavailable:
                the namespaces the plan needs cannot be created here.
        """
        ffi, lib = load_module()
        ready = self._prepare(plan)
        if plan.first(P.JoinNamespaces) is not None:
            return   # nothing to probe by cloning: joining given namespaces fails (typed) at setup
        flags = ready.compiled.clone_flags
        with self._lock:
            known = self._checked.get(flags, None)
        if known is None and probe:
            err = lib.psb_probe(flags, PROBE_IDMAP)
            known = 0 if err == 0 else err
            with self._lock:
                self._checked[flags] = known
        if known:
            from .native_errors import namespace_error   # here: only a failure reads it
            raise namespace_error(plan.namespaces, known)

    # -- per launch -----------------------------------------------------------------

    def spawn(self, plan, launch: Launch) -> NativeChild:
        """Start the sandbox; returns once the command was executed.

        Raises:
            NativeModuleMissing: no compiled module.
            UserNamespaceUnavailable, CapabilityUnavailable: clone failed (which
                namespace is found by retrying each alone).
            SetupError: a setup step failed (``.stage``, ``.op``, ``.errno``,
                ``.filename``; reason setup_failed, proc_mount_failed,
                loopback_setup_failed or parent_died). The command never ran.
            FileNotFoundError, PermissionError, OSError: the command cannot be executed.
        """
        ffi, lib = load_module()
        log = debug_logger()
        started = clock()
        ready = self._prepare(plan)
        prepared = clock()
        argv = list(launch.argv)
        exe = launch.executable or argv[0]
        if plan.argv0 is not None:
            argv[0] = plan.argv0
        env = launch.env   # PWD included (SandboxProcess sets it, as bwrap does)
        try:   # str (SandboxProcess decodes both): one encode each, not one fsencode per string
            argbuf = _fs_encode("\0".join(argv) + "\0")
            envbuf = _fs_encode("\0".join([k + "=" + v for k, v in env.items()]) + "\0")
        except TypeError:   # bytes among them
            argbuf = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
            envbuf = b"\0".join(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()) + b"\0"
        # The one PATH rule (execpath.py): the child only tries these, in order.
        cands = exec_candidates(exe, env.get("PATH"), plan.chdir)
        keep = [ffi.new("char[]", argbuf), ffi.new("char[]", envbuf),
                ffi.new("char[]", b"".join(os.fsencode(c) + b"\0" for c in cands)),
                ffi.new("int[]", list(launch.pass_fds) or [0]),
                ffi.new("int[]", list(launch.close_in_setup) or [0])]
        L = ffi.new("struct psb_launch *")
        L.argbuf, L.argc = keep[0], len(argv)
        L.envbuf, L.envc = keep[1], len(env)
        L.cand, L.ncand, L.searched = keep[2], len(cands), int("/" not in exe)
        L.fwd_signals = FORWARDED_SIGNAL_MASK
        L.stdio = [launch.stdin, launch.stdout, launch.stderr]
        L.pass_fds, L.npass = keep[3], len(launch.pass_fds)
        L.want_status = int(ready.compiled.want_status)
        L.started_fd = L.release_fd = -1
        L.close_first, L.nclose = keep[4], len(launch.close_in_setup)
        L.pty_fd = -1 if launch.pty_socket is None else launch.pty_socket
        L.pty_stdio = launch.pty_stdio
        L.pty_winsize = pack_winsize(launch.pty_winsize)
        L.proxy_fd = -1 if launch.proxy_socket is None else launch.proxy_socket
        L.notify_fd = -1 if launch.notify_socket is None else launch.notify_socket
        # as_pid_1: the launcher's lifetime monitor (fails closed without pidfds)
        L.monitor = int(monitor.wanted(plan))
        L.monitor_exe = init_fd() if L.monitor else -1
        # Step stamps only for a listener (which imported native_stamps) or the debug log.
        stamps = sys.modules.get(f"{__name__}.native_stamps")
        if log is not None and stamps is None:
            from . import native_stamps as stamps
        timed = stamps.page(ffi, lib) if stamps is not None and (log is not None or stamps.listeners) else None
        if timed is not None:
            L.stamps = timed[1]
        res = ffi.new("struct psb_result *")
        on_start = _placing(launch.cgroup_procs, launch.on_start)
        if on_start is None:
            rc = lib.psb_spawn(ready.plan, L, res)
        else:
            rc = _spawn_reporting(lib, ready.plan, L, res, on_start)
        if log is not None:
            log.debug("native: %d ops (translated in %.1f ms); clone, setup and exec in %.1f ms%s",
                      len(ready.compiled.ops), (prepared - started) * 1e3, ms(prepared),
                      "" if rc == 0 else f": failed at native op {res.op}")
        if timed is not None and stamps is not None:
            stamps.report(timed[0], ready.compiled.ops, log)
        if rc != 0:
            from .native_errors import setup_error   # here: only a failure reads it
            err = setup_error(ready.compiled, res.stage, res.op, res.err, exe, plan.namespaces)
            # A failed clone (no child), or a setup step's failure record (written only
            # before the command's execve, which reports STAGE_EXEC; psb_spawn then kills
            # and reaps the child): the command never existed as such. Only these two
            # stages are what check()'s probe would have caught (backends/__init__.py).
            err.before_command = res.stage in (STAGE_CLONE, STAGE_OP)
            raise err from OSError(res.err, os.strerror(res.err) if res.err else "")
        if res.status_fd >= 0:
            os.set_blocking(res.status_fd, False)
        return NativeChild(res.pid, res.status_fd,
                           monitor.Monitor(res.monitor_pid, res.monitor_fd) if res.monitor_pid > 0 else None,
                           res.mntns_fd)

    # -- status ---------------------------------------------------------------------

    def status(self, policy=None) -> BackendStatus:
        """What the native backend can do here, probed one capability at a time in
        throwaway children (never cached: status is not on the launch path).

        Raises:
            Nothing: a missing module is reported as native_module_missing.
        """
        from .probe import probe_native
        return probe_native(policy)

