"""Is the host left as it was? Snapshot before a launch, compare after (invariant 6).

Usable from any test directory::

    from tests.support import hostcheck
    before = hostcheck.snapshot(policy)          # or snapshot(paths=[...])
    ... launch the sandbox, wait for it ...
    hostcheck.assert_unchanged(before)           # AssertionError listing the changes

A snapshot holds the host mount table (mount point, fs type, source, root, options),
restricted to the mount points a sandbox setup could leak a mount onto (``relevant``: the
setup's base directories, the policy's directories, the private temporary directory;
mounts made elsewhere by other programs of a busy machine are not this test's), the listing (names, types, modes, owners) of every host directory a policy touched: the
directory behind each destination, its parent, and the parents of bind sources, and
of the temporary directory. Only the caller's own view is read: no privileges.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
import tempfile
from dataclasses import dataclass, field

from pysandbox import plan as _plan
from pysandbox.policy import Bind, Policy, fs_dest

_TYPES = {stat.S_IFDIR: "d", stat.S_IFREG: "f", stat.S_IFLNK: "l"}


# Where a setup mounts on its own mount namespace's copy of the host tree: the base a
# setup tmpfs goes on (pysandbox/backends/native/native_host.setup_base, bwrap's /tmp), the
# kernel filesystems a sandbox remounts. A propagation leak would show there exactly.
SETUP_POINTS = frozenset({"/", "/tmp", "/run", "/mnt", "/var/tmp", "/proc", "/dev", "/sys", "/newroot", "/oldroot"})


def relevant(mount_point: str, watched) -> bool:
    """Could a sandbox launch have put a mount at ``mount_point``? Yes at a setup point,
    and at or below a watched directory (the policy's, the private TMPDIR) other than
    a setup point (below /tmp or / lie other programs' mounts, not ours)."""
    if mount_point in SETUP_POINTS:
        return True
    return any(mount_point == d or mount_point.startswith(d.rstrip("/") + "/")
               for d in watched if d not in SETUP_POINTS)


def _shared(path: str) -> bool:
    """A sticky directory (/tmp, /var/tmp): every user of the machine makes entries there."""
    try:
        return bool(os.stat(path).st_mode & stat.S_ISVTX)
    except OSError:
        return False


def _ours_in_shared(path: str, entries, watched) -> list:
    """The entries of shared directory ``path`` a launch could have made: those a watched
    path (a policy's destination) passes through, owned by this caller's uid. What other
    programs make there meanwhile, even under this uid but other names, is not ours."""
    prefix = path.rstrip("/") + "/"
    names = {d[len(prefix):].split("/")[0] for d in watched if d.startswith(prefix)}
    return [e for e in entries if e[0] in names and (len(e) < 4 or e[3] == os.getuid())]


@dataclass(frozen=True)
class HostState:
    mounts: tuple
    listings: dict = field(default_factory=dict)   # host dir -> tuple of (name, type) or an error

    def changes(self, after: "HostState") -> list[str]:
        """Human-readable differences from ``self`` (before) to ``after``."""
        gone, new, dirs = self.delta(after)
        out = [f"mount gone: {m}" for m in gone] + [f"mount added: {m}" for m in new]
        for path, (added, removed) in dirs.items():
            out.append(f"{path}: added {added} removed {removed}")
        return out

    def delta(self, after: "HostState"):
        """``(mounts gone, mounts added, {dir: (entries added, entries removed)})``."""
        watched = set(self.listings) | set(after.listings)
        before_c = Counter(m for m in self.mounts if relevant(m[0], watched))   # stacked mounts count
        after_c = Counter(m for m in after.mounts if relevant(m[0], watched))
        gone = sorted((before_c - after_c).elements())
        new = sorted((after_c - before_c).elements())
        dirs = {}
        for path in sorted(set(self.listings) | set(after.listings)):
            a, b = self.listings.get(path), after.listings.get(path)
            if a == b:
                continue
            a = a if isinstance(a, tuple) else ((str(a), "error"),)
            b = b if isinstance(b, tuple) else ((str(b), "error"),)
            added, removed = sorted(set(b) - set(a)), sorted(set(a) - set(b))
            if _shared(path):   # other programs' entries come and go (pip-unpack-*, test dirs, ...)
                added, removed = _ours_in_shared(path, added, watched), _ours_in_shared(path, removed, watched)
                if not added and not removed:
                    continue
            dirs[path] = (added, removed)
        return gone, new, dirs


def host_mounts() -> tuple:
    """The caller's mount table without ids (ids are reused; what is mounted is compared)."""
    rows = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            fields = left.split(" ")
            rows.append((fields[4], right, fields[3], fields[5], fields[2]))
    return tuple(sorted(rows))


def list_dir(path: str):
    try:
        names = os.listdir(path)
    except OSError as exc:
        return f"{type(exc).__name__}:{exc.errno}"
    out = []
    for name in names:
        try:
            st = os.lstat(os.path.join(path, name))
        except OSError:
            continue   # removed meanwhile: not ours to judge
        out.append((name, _TYPES.get(stat.S_IFMT(st.st_mode), "o"), oct(stat.S_IMODE(st.st_mode)), st.st_uid))
    return tuple(sorted(out))


def touched_dirs(policy: Policy | None) -> set[str]:
    """Host directories whose listing would change if a backend created a mount point,
    file or directory on the host for ``policy``: the host path behind every
    destination (resolved through the binds before it), its parent, the same
    path taken literally on the host, bind sources' parents, and chdir."""
    dirs: set[str] = {tempfile.gettempdir(), "/tmp"}
    if policy is None:
        return dirs
    done = []
    sandbox_paths = [fs_dest(op) for op in policy.fs] + ([policy.chdir] if policy.chdir else [])
    for op in policy.fs:
        if isinstance(op, Bind) and op.src is not None:
            dirs.add(os.path.dirname(op.src) or "/")
            dirs.add(op.src)
        dest = fs_dest(op)
        host, _ = _plan.host_path(dest, done)
        for path in (host, dest):
            if path:
                dirs.add(path)
                dirs.add(os.path.dirname(path) or "/")
        done.append(_as_plan_op(op))
    for path in sandbox_paths:
        host, _ = _plan.host_path(path, done)
        if host:
            dirs.add(host)
    return {d for d in dirs if not d.startswith(("/proc/", "/sys/")) and d not in ("/proc", "/sys")}


def _as_plan_op(op):
    """The plan op ``host_path`` understands, without compiling (no stat, no errors)."""
    from pysandbox import policy as P
    if isinstance(op, P.Bind):
        return _plan.BindMount(op.src, op.dest, op.readonly, op.dev, op.optional, op.src_fd)
    if isinstance(op, P.Tmpfs):
        return _plan.MountTmpfs(op.dest, op.size, op.mode)
    if isinstance(op, P.Proc):
        return _plan.MountProc(op.dest)
    if isinstance(op, P.Dev):
        return _plan.MinimalDev(op.dest)
    if isinstance(op, P.Mqueue):
        return _plan.MountMqueue(op.dest)
    if isinstance(op, P.File) and op.bind:
        return _plan.WriteFile(op.dest, op.data, op.fd, op.mode, True, op.readonly)
    return _plan.MakeDir(fs_dest(op))


def snapshot(policy: Policy | None = None, paths=()) -> HostState:
    """The host state relevant to ``policy`` (and any extra ``paths`` to list)."""
    dirs = touched_dirs(policy) | {os.path.normpath(p) for p in paths}
    listings = {d: list_dir(d) for d in sorted(dirs) if not os.path.islink(d)}
    return HostState(mounts=host_mounts(), listings=listings)


def again(before: HostState) -> HostState:
    """A new snapshot of what ``before`` covered."""
    return HostState(mounts=host_mounts(), listings={d: list_dir(d) for d in before.listings})


def compare(before: HostState) -> list[str]:
    """Take a new snapshot of what ``before`` covered and list the changes."""
    return before.changes(again(before))


def assert_unchanged(before: HostState) -> None:
    """Raises:
        AssertionError: listing every change to the mount table or a watched directory.
    """
    changes = compare(before)
    assert not changes, "host changed:\n  " + "\n  ".join(changes)
