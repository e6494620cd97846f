"""No cgroup of ours outlives its launch (README "Resource limits", docs/ARCHITECTURE.md
invariant 14): 1,000 launches with memory and pids limits on each backend, among them
launches killed while they run, commands that are not found (the launch fails after the
cgroup was made) and commands that leave processes behind. Only our names are checked
(``pysandbox-<this pid>-...`` below the launcher's own cgroups): other programs may make
and remove cgroups meanwhile.

Where this launcher cannot make cgroups (an unprivileged user, no delegated subtree) the
launches fail closed, and the check is that they made nothing either.
"""

from __future__ import annotations

import os
import subprocess

import pytest

import pysandbox
from pysandbox import Limits, LimitUnavailable, Policy
from pysandbox.cgroup import PREFIX, host_support, locate

LAUNCHES = 1000


def _ours() -> set[str]:
    """Every cgroup directory of this process's naming below the launcher's own cgroups."""
    found = set()
    for controller in ("memory", "pids"):
        try:
            _version, parent = locate(controller)
        except LimitUnavailable:
            continue
        mine = f"{PREFIX}{os.getpid()}-"
        found |= {os.path.join(parent, name) for name in os.listdir(parent) if name.startswith(mine)}
    return found


def test_no_cgroup_left_after_1000_launches(backend):
    policy = Policy.default(limits=Limits(memory="64M", pids=64))
    before = _ours()
    assert not before, before   # nothing of this process's naming yet
    able = all(host_support(c)[0] for c in ("memory", "pids"))
    seen: set = set()
    for i in range(LAUNCHES):
        try:
            if i % 50 == 7:
                # killed while running, with a descendant that ignores SIGTERM
                proc = pysandbox.Popen(["sh", "-c", "trap '' TERM; sleep 60 & echo go; wait"], policy=policy,
                                       backend=backend, stdout=subprocess.PIPE)
                seen |= {g.path for g in proc._child.cgroups.groups}
                proc.stdout.readline()
                proc.kill()
                proc.wait()
                proc.stdout.close()
            elif i % 50 == 23:
                with pytest.raises(FileNotFoundError):
                    pysandbox.run(["/nonexistent/command"], policy=policy, backend=backend)
            elif i % 50 == 41:
                # leaves a background process for the end of the sandbox to take
                done = pysandbox.run(["sh", "-c", "sleep 60 & exit 0"], policy=policy, backend=backend, timeout=60)
                assert done.returncode == 0
            else:
                with pysandbox.Popen(["true"], policy=policy, backend=backend) as proc:
                    seen |= {g.path for g in proc._child.cgroups.groups}
                    assert proc.wait(timeout=60) == 0
        except LimitUnavailable as exc:
            assert not able, exc
            assert exc.reason.value in ("controller_not_delegated", "cgroup_unavailable")
        assert not any(os.path.exists(p) for p in seen), i
    assert _ours() == set()
    if able:
        assert len(seen) >= LAUNCHES   # every launch made (and removed) its own
