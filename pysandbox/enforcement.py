"""A launch's resource limits on the launcher's side (pysandbox/limits.py): the cgroups
made before the sandbox starts (:mod:`pysandbox.cgroup`), the wall-time deadline, and
at the end which limit, if any, ended the command (:attr:`LimitedChild.limit`).

:class:`LimitedChild` wraps a backend's child (docs/ARCHITECTURE.md, "Child"): the
same ``pid``, ``returncode``, ``forward_signal`` and ``kill_sandbox``; its ``close``
(called once the sandbox was reaped) kills what is left in the cgroups, reads their
counters and removes them.
"""

from __future__ import annotations

import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)

from .errors import LimitUnavailable
from .limits import Limits

TYPE_CHECKING = False
if TYPE_CHECKING:   # at run time imported where a limit needs them: a launch without one imports neither
    from .cgroup import Cgroups


def prepare(limits: Limits | None) -> tuple[Cgroups | None, tuple]:
    """The cgroups of one launch, made before the backend starts it (None: no memory or
    pids limit), and the rlimits it needs on top of ``limits.rlimits()``: the pids
    limit as ``RLIMIT_NPROC`` where no cgroup can enforce it and the kernel counts it
    per user namespace (:mod:`pysandbox.nproc`).

    Raises:
        LimitUnavailable: cgroup_unavailable, controller_not_delegated: the command does
            not run (fail closed).
    """
    if limits is None or not limits.cgroup:
        return None, ()
    from . import nproc
    from .cgroup import Cgroups
    try:
        return Cgroups.create(limits.cgroup), ()
    except LimitUnavailable as exc:
        if limits.pids is None or not nproc.available()[0]:
            raise
        if exc.limit not in (None, "pids") and limits.memory is not None:
            raise   # the memory limit cannot be enforced: fail closed whatever pids does
    rest = {k: v for k, v in limits.cgroup.items() if k != "pids"}
    return (Cgroups.create(rest) if rest else None), (nproc.rlimit(limits.pids),)


def which_limit(limits: Limits, returncode: int | None, hits: dict, wall_fired: bool) -> str | None:
    """The limit that ended the command (limits.KINDS), or None."""
    if wall_fired:
        return "wall_time"
    if hits.get("memory"):
        return "memory"
    if limits.cpu_time is not None and returncode == -signal.SIGXCPU:
        return "cpu_time"
    if limits.file_size is not None and returncode == -signal.SIGXFSZ:
        return "file_size"
    if hits.get("pids"):
        return "pids"   # forks were refused: the limit was reached (the command may have gone on)
    return None


def deadline(seconds: float, expired, name: str):
    """A started daemon ``threading.Timer`` that calls ``expired()`` after ``seconds`` (a wall time)."""
    import threading   # here: only a wall-time limit starts a timer (issue 28)
    timer = threading.Timer(seconds, expired)
    timer.daemon = True
    timer.name = name
    timer.start()
    return timer


def host_limits() -> dict:
    """Which limits this launcher can enforce here, and how or why not: ``{limit:
    {"available", "mechanism", "reason", "detail"}}`` (``pysandbox status``). The cgroup
    limits are probed by making and removing an empty cgroup of ours."""
    from .cgroup import host_support
    out = {}
    for kind, mechanism in (("cpu_time", "RLIMIT_CPU"), ("file_size", "RLIMIT_FSIZE"),
                            ("open_files", "RLIMIT_NOFILE"), ("wall_time", "launcher deadline")):
        out[kind] = {"available": True, "mechanism": mechanism, "reason": None, "detail": ""}
    for kind in ("memory", "pids"):
        ok, reason, detail = host_support(kind)
        out[kind] = {"available": ok, "mechanism": detail if ok else "cgroup", "reason": reason,
                     "detail": "" if ok else detail}
    from . import nproc
    if not out["pids"]["available"] and nproc.available()[0]:
        out["pids"] = {"available": True, "mechanism": nproc.MECHANISM, "reason": None,
                       "detail": f"no cgroup: {out['pids']['reason']}"}
    return out


class LimitedChild:
    """A backend's child under ``limits``, in ``cgroups`` (or None)."""

    def __init__(self, child, limits: Limits, cgroups: Cgroups | None):
        self._child = child
        self.pid = child.pid
        self.limits = limits
        self.cgroups = cgroups
        self.limit: str | None = None
        self.wall_fired = False
        self._rc = None
        self._timer = None

    def start_deadline(self, kill) -> None:
        """Call ``kill()`` (ends the whole sandbox) once ``wall_time`` seconds passed."""
        if self.limits.wall_time is None:
            return

        def expired():
            self.wall_fired = True
            kill()
        self._timer = deadline(self.limits.wall_time, expired, "pysandbox-wall-time")

    def returncode(self, wait_status: int) -> int:
        self._rc = self._child.returncode(wait_status)
        return self._rc

    def forward_signal(self, sig: int) -> None:
        self._child.forward_signal(sig)

    def kill_sandbox(self) -> None:
        self._child.kill_sandbox()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._child.close()
        hits = self.cgroups.close() if self.cgroups is not None else {}
        self.limit = which_limit(self.limits, self._rc, hits, self.wall_fired)

    def __getattr__(self, name):   # backend-specific attributes (sandbox_pid, ...)
        return getattr(self._child, name)
