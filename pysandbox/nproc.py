"""The pids limit without a cgroup: ``RLIMIT_NPROC`` counted per user namespace.

Since Linux 5.14 the kernel counts ``RLIMIT_NPROC`` per user namespace (ucounts): a
fork is refused when the processes and threads of the forking uid *in the forking
process's user namespace* (and the namespaces below it) reach the limit. Every sandbox
has a user namespace of its own (docs/ARCHITECTURE.md, invariant 2), so the limit set
in the sandbox bounds exactly the sandbox's processes, never the caller's others
(counted in the caller's namespace). The limit cannot be raised from inside: raising a
hard limit needs ``CAP_SYS_RESOURCE`` in the initial user namespace.

It is used for ``Limits.pids`` only where no cgroup can enforce it
(:func:`pysandbox.enforcement.prepare`: ``cgroup_unavailable`` or
``controller_not_delegated``) and only where the kernel enforces it for this caller:
Linux 5.14 or later, and a caller the kernel does not exempt (host uid 0, the
``INIT_USER``, and a process with ``CAP_SYS_RESOURCE`` or ``CAP_SYS_ADMIN`` in the
initial namespace are never refused a fork by ``RLIMIT_NPROC``). Elsewhere the pids
limit fails closed as before. What it does not give: a count of refused forks (the
cgroup's ``pids.events``), so a command ended by it reports no ``limit``.
"""

from __future__ import annotations

import os
import resource

MECHANISM = "RLIMIT_NPROC (per user namespace)"
_CAP_SYS_ADMIN, _CAP_SYS_RESOURCE = 21, 24


def _kernel_counts_per_userns(release: str | None = None) -> bool:
    release = os.uname().release if release is None else release
    try:
        major, minor = (int(x) for x in release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


def _exempt(status: str = "/proc/self/status") -> bool:
    """Whether the kernel never refuses this caller a fork for RLIMIT_NPROC."""
    if os.geteuid() == 0 or os.getuid() == 0:
        return True
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    eff = int(line.split()[1], 16)
                    return bool(eff & (1 << _CAP_SYS_ADMIN | 1 << _CAP_SYS_RESOURCE))
    except (OSError, ValueError, IndexError):
        return True   # unknown: not relied on
    return True


def available() -> tuple[bool, str]:
    """``(usable, why not)``: whether RLIMIT_NPROC bounds a sandbox's processes here."""
    if not _kernel_counts_per_userns():
        return False, f"RLIMIT_NPROC is counted per user namespace since Linux 5.14 (this is {os.uname().release})"
    if _exempt():
        return False, "the kernel does not apply RLIMIT_NPROC to this caller (uid 0, CAP_SYS_RESOURCE or CAP_SYS_ADMIN)"
    return True, ""


def rlimit(pids: int) -> tuple[int, int, int]:
    """``(resource, soft, hard)`` for a sandbox of at most ``pids`` processes and threads."""
    return (resource.RLIMIT_NPROC, pids, pids)
