"""Starting bwrap and holding on to it: the launcher's side of a sandbox's lifetime.

- :class:`BwrapChild`: a running bwrap, its sandbox's pid 1 (by pidfd, :func:`pid1_fd`),
  the command's status, signal forwarding and killing the whole sandbox;
- :data:`spawner`: the one long-lived thread that forks every bwrap, with
  :func:`pdeathsig_preexec` (the sandbox dies with the launching process);
- waiting for the start: :func:`read_info` (bwrap's ``--info-fd``) and, without our
  init, :func:`wait_for_exec` (the command was seen executed); :func:`first_child`;
- as_pid_1: :func:`watch` starts the lifetime monitor, then opens our init's gate.
"""

from __future__ import annotations

import ctypes
import os
import queue
import select
import signal
import threading
import time
from ...records import dataclass
from .. import monitor
from ..monitor import Monitor


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
    status_fd: int = -1
    pidfd: int = -1
    monitor: Monitor | None = None   # as_pid_1: the launcher's lifetime monitor (monitor.py)

    _killed = False

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
        if self._killed:
            # We SIGKILLed pid 1, then bwrap: bwrap may see its child die first and exit
            # 128+9 before our SIGKILL lands; either way the sandbox was killed.
            return -signal.SIGKILL
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
            target = self.sandbox_pid if self.as_pid_1 else first_child(self.sandbox_pid)
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
        self._killed = True
        self._signal_pid1(9)

    def _signal_pid1(self, sig: int) -> bool:
        if self.pidfd < 0:
            return False
        try:
            signal.pidfd_send_signal(self.pidfd, sig)
            return True
        except ProcessLookupError:
            return False

    def close(self) -> None:
        """Called once bwrap was reaped. Its pid 1 is gone then, unless bwrap itself was
        killed before that pid 1 bound itself to bwrap's life: SIGKILL it (by pidfd:
        never another process) so nothing outlives bwrap; the monitor (as_pid_1) ended
        and reaped."""
        self._signal_pid1(9)
        if self.monitor is not None:
            self.monitor.end()
        for name in ("status_fd", "pidfd"):
            fd = getattr(self, name)
            setattr(self, name, -1)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


def pid1_fd(child_pid: int, bwrap_pid: int) -> int:
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


def first_child(pid: int | None) -> int | None:
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


PR_SET_PDEATHSIG = 1
INFO_TIMEOUT = 60.0
_libc = None


def pdeathsig_preexec(parent_pid: int, cgroup_procs: tuple[str, ...] = ()):
    """In the forked child, before exec: SIGKILL when the spawning thread dies, and exit at
    once if the parent already died (bwrap sets its own PR_SET_PDEATHSIG only after
    clone(): without this a launcher killed during bwrap's start leaves the sandbox).
    Then into each of ``cgroup_procs`` (the launch's cgroups, pysandbox/cgroup.py), so
    bwrap and everything it starts is in them; a refusal ends the child (exit 127) and
    the launch fails (its cgroups' emptiness is checked by the caller)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    prctl = _libc.prctl
    paths = [os.fsencode(p) for p in cgroup_procs]

    def preexec():
        if prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0) != 0 or os.getppid() != parent_pid:
            os._exit(127)
        for path in paths:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                os.write(fd, b"0")   # 0: the writing process
                os.close(fd)
            except OSError:
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


spawner = _Spawner()


def wait_for_exec(child: BwrapChild, bwrap_path: str, timeout: float = INFO_TIMEOUT) -> int | None:
    """Return once the command runs (its /proc/PID/exe is no longer bwrap) or bwrap ended.

    Returns None when the command was seen running, else bwrap's exit status if it
    ended first (None if it was killed or the wait timed out).

    bwrap's pid 1 binds itself to bwrap's life (PR_SET_PDEATHSIG) only after its setup;
    a launcher killed before that would leave the sandbox running. By the time the
    command is executed that is done. bwrap is never reaped here (WNOWAIT).
    """
    start = time.monotonic()
    deadline = start + timeout
    pause = 0.0002
    while time.monotonic() < deadline:
        target = child.sandbox_pid if child.as_pid_1 else first_child(child.sandbox_pid)
        if target is not None:
            try:
                if os.readlink(f"/proc/{target}/exe") != bwrap_path:
                    return None
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


def read_info(fd: int, timeout: float = INFO_TIMEOUT) -> bytes:
    """Read ``--info-fd`` until bwrap closes it (right after its own PR_SET_PDEATHSIG)."""
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


def end_bwrap(proc) -> None:
    """SIGKILL and reap bwrap, whose pid only we reap (``_child_created`` is False). Not
    ``proc.kill()``: subprocess polls first, and a bwrap that already exited (its setup
    failed) was reaped there, so the caller's ``waitpid`` raised ECHILD in place of the
    launch's own error and skipped the cleanup after it (the lifetime monitor was left a
    zombie)."""
    try:
        os.kill(proc.pid, signal.SIGKILL)   # not reaped yet: the pid is still bwrap's
    except ProcessLookupError:
        pass
    os.waitpid(proc.pid, 0)


def watch(child: BwrapChild, proc, gate_w: int) -> bool:
    """as_pid_1: start the launcher's lifetime monitor on pid 1's pidfd (checked to be
    bwrap's child, so no reused pid), then open our init's gate (``-w``): the command
    runs only once the monitor exists. A monitor that cannot start fails the launch,
    the command never ran (the gate closed without a byte: the init exits).

    Returns False, the gate closed unopened, when pid 1 is gone already: a setup step
    failed first (bwrap's, or our init's), and the backend's ``_wait_for_init`` reads which, as
    it does for any launch (bwrap's exit, the init's report), in place of a generic
    "pid 1 ended" that named neither.

    Raises:
        CapabilityUnavailable (lifetime_monitor_unavailable).
    """
    if child.pidfd < 0:
        os.close(gate_w)
        return False
    try:
        child.monitor = monitor.start(child.pidfd)
        try:
            os.write(gate_w, b"\1")
        except BrokenPipeError:
            # The init is gone without the command: a setup step of its own failed
            # first (its report waits in the status pipe), or bwrap could not exec it.
            # _wait_for_init reads which, as it would had the gate opened in time.
            pass
    except BaseException:
        os.close(gate_w)
        end_bwrap(proc)   # bwrap, our child: its death takes the sandbox with it
        child.close()   # the monitor too: a failure here must leave no process behind
        raise
    os.close(gate_w)
    return True
