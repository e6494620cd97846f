"""The cgroups of a launch with memory or process limits (pysandbox/limits.py).

For each controller a limit needs (``memory``, ``pids``) :func:`locate` finds the
launcher's own cgroup from ``/proc/self/cgroup``: cgroup v1 where the controller has a
v1 hierarchy (``ROOT/<controller>/<path>``), else cgroup v2 (``ROOT/<path>``, or under
``ROOT/unified`` for a hybrid host) where the controller is in that cgroup's
``cgroup.controllers``. :class:`Cgroups` makes one new cgroup per controller *below*
that one (a unique name, ``pysandbox-<pid>-<start>-<ns>-<n>-<random>``, the scheme of
:mod:`pysandbox.cgroup_leftovers`), writes the limit, and the
backend places the sandbox in it before its setup runs (``cgroup.procs``: the native
backend writes the first process's pid before any step runs, the bwrap backend's
forked child writes itself before it execs bwrap). At the end :meth:`Cgroups.close`
kills every process still in it (``cgroup.kill`` on v2; on v1 each pid of
``cgroup.procs``, by pidfd, only while it is still in our cgroup, until it is empty),
reads what was hit, and removes it. Before it makes its own, each launch removes the
empty cgroups that SIGKILLed launchers left in the same parents
(:func:`pysandbox.cgroup_leftovers.sweep`).

``ROOT`` is ``/sys/fs/cgroup``, or ``$PYSANDBOX_CGROUP_ROOT`` (the tests' seam: a tree
the launcher cannot write). Nothing here is created anywhere else.

Reasons: ``cgroup_unavailable`` (no hierarchy with the controller, or the directory
found is not a cgroup with it), ``controller_not_delegated`` (a cgroup the launcher may
not create or write: cgroup v1 as an unprivileged user, a v2 cgroup not delegated).
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import time

from . import cgroup_leftovers
from .errors import LimitUnavailable, Reason
from .limits import CGROUP_KINDS

ROOT_ENV = "PYSANDBOX_CGROUP_ROOT"
PREFIX = cgroup_leftovers.PREFIX
NESTED_PREFIX = "cmd-"   # a session command's own cgroup, below the session's
_counter = itertools.count()
# v1 files / v2 files: (limit file, events file, events key)
_FILES = {
    ("memory", 1): ("memory.limit_in_bytes", "memory.oom_control", "oom_kill"),
    ("memory", 2): ("memory.max", "memory.events", "oom_kill"),
    ("pids", 1): ("pids.max", "pids.events", "max"),
    ("pids", 2): ("pids.max", "pids.events", "max"),
}
_NOT_DELEGATED = (errno.EACCES, errno.EPERM, errno.EROFS)


def cgroup_root() -> str:
    return os.environ.get(ROOT_ENV) or "/sys/fs/cgroup"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def locate(controller: str, root: str | None = None, self_cgroup: str = "/proc/self/cgroup") -> tuple[int, str]:
    """``(version, directory)`` of the launcher's own cgroup for ``controller``.

    Raises:
        LimitUnavailable (cgroup_unavailable): no cgroup hierarchy has the controller.
    """
    root = cgroup_root() if root is None else root
    try:
        lines = _read(self_cgroup).splitlines()
    except OSError as exc:
        raise LimitUnavailable(f"cannot read {self_cgroup}: {exc.strerror}", Reason.CGROUP_UNAVAILABLE,
                               limit=controller) from None
    v2_path = None
    for line in lines:
        hier, names, path = (line.split(":", 2) + ["", ""])[:3]
        if hier == "0" and names == "":
            v2_path = path
            continue
        listed = names.split(",")
        if controller in listed:
            for mount in (controller, names):
                d = os.path.join(root, mount) + (path if path != "/" else "")
                if os.path.isdir(d):
                    return 1, d
    if v2_path is not None:
        for mount in (root, os.path.join(root, "unified")):
            d = mount + (v2_path if v2_path != "/" else "")
            try:
                if controller in _read(os.path.join(d, "cgroup.controllers")).split():
                    return 2, d
            except OSError:
                continue
    raise LimitUnavailable(f"no cgroup hierarchy here has the {controller} controller (cgroup v1 "
                           f"{root}/{controller}, or cgroup v2 with {controller} in cgroup.controllers)",
                           Reason.CGROUP_UNAVAILABLE, limit=controller)


def _write(path: str, text: str) -> None:
    """Write to an existing control file (never create one: a directory that is not a
    cgroup has none)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _fail(controller: str, what: str, exc: OSError) -> LimitUnavailable:
    if exc.errno in _NOT_DELEGATED:
        return LimitUnavailable(f"the {controller} limit needs a cgroup below the launcher's own, and {what} "
                                f"is refused ({exc.strerror}): the {controller} controller is not delegated to "
                                f"this user (cgroup v1 needs root; cgroup v2 a delegated subtree)",
                                Reason.CONTROLLER_NOT_DELEGATED, exc.errno, limit=controller)
    return LimitUnavailable(f"the {controller} limit needs a cgroup with the {controller} controller; {what} "
                            f"failed ({exc.strerror or exc}): not a cgroup with that controller",
                            Reason.CGROUP_UNAVAILABLE, exc.errno, limit=controller)


class Cgroup:
    """One cgroup of ours for one controller (v1) or for all of them (v2)."""

    def __init__(self, version: int, path: str, controllers: tuple[str, ...]):
        self.version, self.path, self.controllers = version, path, controllers

    def events(self, controller: str) -> int:
        """The count of ``controller``'s limit being hit (OOM kills; refused forks), or 0."""
        _limit, name, key = _FILES[(controller, self.version)]
        try:
            for line in _read(os.path.join(self.path, name)).splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(os.path.join(self.path, "cgroup.procs")).split()]
        except (OSError, ValueError):
            return []

    def _mine(self, pid: int) -> bool:
        """Whether ``pid`` is (still) in this cgroup, by /proc/PID/cgroup."""
        rel = self.path
        try:
            for line in _read(f"/proc/{pid}/cgroup").splitlines():
                path = line.split(":", 2)[2]
                if path != "/" and rel.endswith(path):
                    return True
        except (OSError, IndexError):
            pass
        return False

    def kill(self) -> None:
        """SIGKILL every process in this cgroup (and nothing else)."""
        if self.version == 2 and os.path.exists(os.path.join(self.path, "cgroup.kill")):
            try:
                _write(os.path.join(self.path, "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for pid in self.pids():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                # checked after the pidfd pins the process: a reused pid is not ours
                if self._mine(pid):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)

    def remove(self, deadline: float) -> bool:
        """Kill what is left and rmdir, until ``deadline`` (monotonic); False if it stays.
        A session's per-command cgroups below it (``NESTED_PREFIX``) go first."""
        try:
            nested = [e.path for e in os.scandir(self.path)
                      if e.name.startswith(NESTED_PREFIX) and e.is_dir(follow_symlinks=False)]
        except OSError:
            nested = []
        for path in nested:
            Cgroup(self.version, path, self.controllers).remove(deadline)
        pause = 0.001
        while True:
            self.kill()
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    return False
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


class Cgroups:
    """The cgroups of one launch: made by :meth:`create`, the sandbox placed in them by
    the backend (:attr:`procs_files`), ended by :meth:`close`."""

    def __init__(self, groups: list[Cgroup]):
        self.groups = groups
        self.hits: dict[str, int] = {}
        self.closed = False

    @classmethod
    def create(cls, limits: dict, root: str | None = None) -> "Cgroups":
        """New cgroups below the launcher's own with ``limits`` (``{"memory": bytes,
        "pids": count}``) written. First the empty cgroups of dead launchers are removed
        from the parents (:func:`_sweep`; that never fails the launch).

        Raises:
            LimitUnavailable: cgroup_unavailable or controller_not_delegated (nothing of
                ours is left behind).
        """
        where = {c: locate(c, root) for c in limits}
        _sweep(where, root)
        name = cgroup_leftovers.name(next(_counter))
        made = cls([])
        try:
            by_dir: dict = {}
            for c, (version, parent) in where.items():
                by_dir.setdefault((version, parent), []).append(c)
            for (version, parent), controllers in by_dir.items():
                if version == 2:
                    _enable(parent, controllers)
                path = os.path.join(parent, name)
                try:
                    os.mkdir(path, 0o755)
                except OSError as exc:
                    raise _fail(controllers[0], f"creating {path}", exc) from None
                group = Cgroup(version, path, tuple(controllers))
                made.groups.append(group)
                for c in controllers:
                    _set_limit(group, c, limits[c])
        except BaseException:
            made.close()
            raise
        return made

    def nested(self, name: str, limits: dict) -> "Cgroups":
        """A cgroup ``NESTED_PREFIX + name`` below each of ours that has a controller of
        ``limits`` (a session's per-command cgroups: pysandbox/session_limits.py), with
        the limits written; the caller places the command in them.

        Raises:
            LimitUnavailable (cgroup_unavailable): a controller of ``limits`` is not ours,
                or on cgroup v2 (our cgroup holds the session's server: no controller can
                be enabled below a cgroup with processes); nothing is left behind.
        """
        made = Cgroups([])
        try:
            for c in limits:
                group = next((g for g in self.groups if c in g.controllers), None)
                if group is None or group.version != 1:
                    raise LimitUnavailable(f"a command's own {c} limit needs a cgroup below the session's, which "
                                           "only cgroup v1 allows here (on cgroup v2 the session's cgroup holds "
                                           "its server)", Reason.CGROUP_UNAVAILABLE, limit=c)
                path = os.path.join(group.path, NESTED_PREFIX + name)
                target = next((g for g in made.groups if g.path == path), None)
                if target is None:
                    try:
                        os.mkdir(path, 0o755)
                    except OSError as exc:
                        raise _fail(c, f"creating {path}", exc) from None
                    target = Cgroup(1, path, tuple(k for k in group.controllers if k in limits))
                    made.groups.append(target)
                _set_limit(target, c, limits[c])
        except BaseException:
            made.close()
            raise
        return made

    @property
    def procs_files(self) -> tuple[str, ...]:
        return tuple(os.path.join(g.path, "cgroup.procs") for g in self.groups)

    def counters(self) -> dict[str, int]:
        """``{controller: times its limit was hit so far}`` (a session reads them around
        each command: pysandbox/session_limits.py)."""
        if self.closed:
            return dict(self.hits)
        return {c: g.events(c) for g in self.groups for c in g.controllers}

    def close(self, timeout: float = 10.0) -> dict[str, int]:
        """Kill whatever is left in our cgroups, read the hit counters, remove them.
        Returns ``{controller: times its limit was hit}``. Idempotent."""
        if self.closed:
            return self.hits
        self.hits.update(self.counters())
        self.closed = True
        deadline = time.monotonic() + timeout
        left = [g.path for g in self.groups if not g.remove(deadline)]
        if left:
            from .trace import debug_logger
            log = debug_logger()
            if log is not None:
                log.debug("cgroup: could not remove %s", ", ".join(left))
        return self.hits


def _sweep(where: dict, root: str | None) -> None:
    """The leftovers of dead launchers in every parent where launches make their cgroups
    (each controller's on v1, also those of controllers this launch does not limit).
    Never fails the launch."""
    try:
        parents = [d for _v, d in where.values()]
        for c in CGROUP_KINDS:
            if c not in where:
                try:
                    parents.append(locate(c, root)[1])
                except LimitUnavailable:
                    pass
        cgroup_leftovers.sweep(parents)
    except Exception as exc:   # noqa: BLE001 - a sweep never fails a launch
        from .trace import debug_logger
        log = debug_logger()
        if log is not None:
            log.debug("cgroup: sweep of leftovers failed: %r", exc)


def place_pid(procs_files, pid: int) -> None:
    """Move ``pid`` (the sandbox's first process, before any step of its setup) into
    each cgroup whose ``cgroup.procs`` is in ``procs_files``.

    Raises:
        LimitUnavailable: the kernel refused (controller_not_delegated, ...).
    """
    for path in procs_files:
        try:
            _write(path, str(pid))
        except OSError as exc:
            reason = Reason.CONTROLLER_NOT_DELEGATED if exc.errno in _NOT_DELEGATED else Reason.CGROUP_UNAVAILABLE
            raise LimitUnavailable(f"placing the sandbox in its cgroup {os.path.dirname(path)} failed "
                                   f"({exc.strerror}); the command did not run", reason, exc.errno) from None


def _enable(parent: str, controllers: list[str]) -> None:
    """cgroup v2: the controllers enabled for the children of ``parent``."""
    try:
        enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
    except OSError as exc:
        raise _fail(controllers[0], f"reading {parent}/cgroup.subtree_control", exc) from None
    for c in controllers:
        if c not in enabled:
            try:
                _write(os.path.join(parent, "cgroup.subtree_control"), f"+{c}")
            except OSError as exc:
                if exc.errno == errno.EBUSY:   # processes in parent: the "no internal processes" rule
                    exc = OSError(errno.EPERM, "the launcher's own cgroup has processes: enable the "
                                  "controller in a delegated parent (cgroup.subtree_control)")
                raise _fail(c, f"enabling +{c} in {parent}/cgroup.subtree_control", exc) from None


def _set_limit(group: Cgroup, controller: str, value: int) -> None:
    writes = [(_FILES[(controller, group.version)][0], str(value), True)]
    if controller == "memory":
        # with swap accounting, no escape into swap: v1 limits memory + swap to the same
        # value, v2 allows no swap (each only where the file exists)
        writes.append(("memory.memsw.limit_in_bytes", str(value), False) if group.version == 1
                      else ("memory.swap.max", "0", False))
    for name, text, required in writes:
        path = os.path.join(group.path, name)
        if not required and not os.path.exists(path):
            continue
        try:
            _write(path, text)
        except OSError as exc:
            raise _fail(controller, f"writing {path}", exc) from None


def host_support(controller: str, root: str | None = None) -> tuple[bool, str | None, str]:
    """Whether this launcher can make a cgroup with ``controller`` here, by making (and
    removing) an empty one: ``(ok, reason, detail)``."""
    big = {"memory": 1 << 40, "pids": 1 << 20}[controller]
    try:
        groups = Cgroups.create({controller: big}, root)
    except LimitUnavailable as exc:
        return False, exc.reason.value, exc.args[0]
    version = groups.groups[0].version
    groups.close()
    return True, None, f"cgroup v{version}"
