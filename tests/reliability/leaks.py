"""What a launch could leave behind in the launching process and on the host.

``snapshot()`` records this process's descriptors, the host mount table (this
process's /proc/self/mountinfo) at the mount points a launch could leak onto
(``hostcheck.relevant``: other programs' mounts elsewhere are not ours), this
process's children, the temporary directory (``tempfile.gettempdir()``: point TMPDIR
at a private directory so other users of /tmp do not count) and the /dev/shm entries
named by ``SHM_MARKERS`` (what a sandbox's commands or our library name there; a
busy machine's other programs of the same user make the rest). ``unchanged()`` asserts nothing was
added. ``survivors(marker)`` lists host processes whose command line holds ``marker``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass

from tests.support import processes_with
from tests.support.hostcheck import relevant

# /dev/shm names that count: the library's prefixes, and the marker tests' commands
# write under (tests/reliability/test_soak.py writes /dev/shm/<SHM_TAG>-N inside).
SHM_TAG = "psb-shm"
SHM_MARKERS = ("psb", "pysandbox", SHM_TAG)


@dataclass(frozen=True)
class Snapshot:
    fds: frozenset
    mounts: frozenset
    children: frozenset
    tmp: frozenset
    shm: frozenset


def open_fds() -> frozenset:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            out.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:   # the descriptor listdir itself used, now closed
            pass
    return frozenset(out)


def mounts() -> frozenset:
    """Mount table lines whose mount point a launch could have used (see module doc)."""
    watched = {tempfile.gettempdir()}
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    return frozenset(line for line in lines if relevant(line.split(" ")[4], watched))


def children(pid: int | None = None) -> frozenset:
    pid = os.getpid() if pid is None else pid
    out = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return frozenset()
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return frozenset(out)


def _listing(path: str, mine_only: bool = False) -> frozenset:
    try:
        names = os.listdir(path)
    except OSError:
        return frozenset()
    if not mine_only:
        return frozenset(names)
    uid = os.getuid()
    out = set()
    for name in names:
        try:
            if os.lstat(os.path.join(path, name)).st_uid == uid:
                out.add(name)
        except OSError:
            pass
    return frozenset(out)


def snapshot() -> Snapshot:
    tmp = tempfile.gettempdir()
    # The shared /tmp changes under other users' feet: only a private TMPDIR is compared
    # (tests/reliability/conftest.py gives every reliability test one).
    listing = _listing(tmp) if tmp.rstrip("/") != "/tmp" else _listing(tmp, mine_only=True)
    shm = frozenset(n for n in _listing("/dev/shm", mine_only=True) if n.startswith(SHM_MARKERS))
    return Snapshot(fds=open_fds(), mounts=mounts(), children=children(), tmp=listing, shm=shm)


def diff(before: Snapshot, after: Snapshot) -> list[str]:
    """What ``after`` holds that ``before`` did not (removals are not leaks)."""
    problems = []
    for name in ("fds", "mounts", "children", "tmp", "shm"):
        added = getattr(after, name) - getattr(before, name)
        if added:
            problems.append(f"new {name}: {sorted(added)[:10]}")
    return problems


def settle(before: Snapshot, limit: float = 10.0) -> list[str]:
    """Wait (bounded) for exiting processes and closing descriptors, then diff."""
    deadline = time.monotonic() + limit
    while True:
        problems = diff(before, snapshot())
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(0.05)


@contextlib.contextmanager
def unchanged(limit: float = 10.0, policy=None, paths=()):
    """Assert the block leaves no descriptor, mount, child, temporary file behind.

    With ``policy`` (or ``paths``), also that no host directory the policy touches
    changed (tests/support/hostcheck.py: no mount point created on the host).
    """
    host = None
    if policy is not None or paths:
        from tests.support import hostcheck
        host = hostcheck.snapshot(policy, paths=paths)
    before = snapshot()
    yield before
    problems = settle(before, limit)
    assert not problems, "left behind: " + "; ".join(problems)
    if host is not None:
        # The shared /tmp is left out: other users of the machine write there meanwhile,
        # and what a launch could leave in a temporary directory is checked above, in
        # the private TMPDIR. The policy's own directories (and their parents) count.
        gone, new, dirs = host.delta(hostcheck.again(host))
        changes = [f"mount gone: {m}" for m in gone] + [f"mount added: {m}" for m in new]
        changes += [f"{path}: added {added} removed {removed}" for path, (added, removed) in dirs.items()
                    if path != "/tmp"]
        assert not changes, "host changed:\n  " + "\n  ".join(changes)


def survivors(marker: str) -> list[tuple[int, str]]:
    """Host processes whose command line contains ``marker`` (not this process)."""
    return [(pid, cmd.replace(b"\0", b" ").decode(errors="replace")[:200]) for pid, cmd in processes_with(marker)]


def wait_no_survivors(marker: str, limit: float = 10.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + limit
    while True:
        found = survivors(marker)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def rss_kib(pid: int | None = None) -> int:
    with open(f"/proc/{'self' if pid is None else pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise OSError("no VmRSS")
