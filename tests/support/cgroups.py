"""Cgroup names for the leftover-sweep tests (pysandbox/cgroup_leftovers.py): a name of
our scheme for any pid, the parents where launches make their cgroups, a pid that is
dead, and the cleanup of what a test made."""

from __future__ import annotations

import os
import subprocess
import time

from pysandbox.cgroup import PREFIX, Cgroup, locate
from pysandbox.cgroup_leftovers import identity, start_time
from pysandbox.errors import LimitUnavailable


def leftover_name(pid: int, start: int | None = None, ns: str | None = None) -> str:
    """A launch cgroup's name as launcher ``pid`` (start time ``start``, default its real
    one or 1 for a dead pid, namespaces ``ns``, default this process's) would make it."""
    start = (start_time(pid) or 1) if start is None else start
    return f"{PREFIX}{pid}-{start}-{identity()[1] if ns is None else ns}-0-{os.urandom(4).hex()}"


def dead_pid() -> int:
    """The pid of a child that ran and was reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def parents() -> list[str]:
    """The directories where this launcher's launches make their cgroups (one per
    controller hierarchy on cgroup v1, one on v2)."""
    out = []
    for c in ("memory", "pids"):
        try:
            d = locate(c)[1]
        except LimitUnavailable:
            continue
        if d not in out:
            out.append(d)
    return out


def wait_empty(path: str, limit: float = 30.0) -> bool:
    """Whether the cgroup at ``path`` has no process (waiting up to ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    while Cgroup(1, path, ()).pids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def remove(paths) -> None:
    """Kill what is in each of ``paths`` (cgroups this test made) and remove them."""
    for path in paths:
        if os.path.isdir(path):
            Cgroup(1, path, ()).remove(time.monotonic() + 10)
