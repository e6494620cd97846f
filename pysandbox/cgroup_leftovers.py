"""The names of a launch's cgroups (pysandbox/cgroup.py) and the sweep of the ones a
killed launcher left.

A launch's cgroup is named ``pysandbox-<pid>-<start>-<ns>-<n>-<random>``: the launcher's
pid, its start time (``/proc/PID/stat`` field 22, clock ticks since boot), ``ns`` (8 hex
digits, a crc32 of the launcher's pid and time namespaces: the ones ``pid`` and
``start`` are read in), the launch's number in this process and 4 random bytes (hex).
A launcher that is SIGKILLed cannot remove its cgroups; :func:`sweep`, run by the next
limited launch, removes such a leftover from the parent cgroups where launches make
theirs, only when all of these hold:

- its name is exactly of this scheme, with this process's ``ns`` (a name made in another
  pid or time namespace cannot be judged from here, and stays);
- its launcher is dead: ``kill(pid, 0)`` fails with ESRCH, or the process with that pid
  now has another start time (the pid was reused); a process with that pid and start
  time, or one whose start time cannot be read, is its launcher alive (kept);
- it is a directory (never through a symlink) owned by this user;
- it is empty: ``rmdir`` only (a cgroup with processes or child cgroups refuses with
  EBUSY, a plain directory with files with ENOTEMPTY: kept).

A live launcher's cgroup, also one it is making right now, has a live pid with its start
time, so it is never removed. The cost per launch is one listing of each parent (no
recursion); nothing of the sweep fails the launch (its refusals go to the debug log).
"""

from __future__ import annotations

import errno
import os
import re
import stat

PREFIX = "pysandbox-"
# compiled by `re` on first use (its cache), not when a launch imports the module
_NAME = r"(?a)pysandbox-([1-9][0-9]{0,9})-([0-9]{1,20})-([0-9a-f]{8})-[0-9]+-[0-9a-f]{8}"
_UNKNOWN = "00000000"   # no /proc to read the identity from: such names are never judged
_identity: tuple[int, tuple[int, str]] | None = None   # (pid it was read for, (start, ns))


def start_time(pid: int | str) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (the process's start, in clock ticks since boot, as
    this process's time namespace shows it), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        # the name (field 2) is in parentheses and may hold any byte: count after the last ")"
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _namespaces() -> str:
    """8 hex digits naming this process's pid and time namespaces, or :data:`_UNKNOWN`."""
    parts = []
    for ns in ("pid", "time"):
        try:
            st = os.stat(f"/proc/self/ns/{ns}")
            parts.append(f"{st.st_dev}:{st.st_ino}")
        except FileNotFoundError:
            if ns == "pid":
                return _UNKNOWN
            parts.append("-")   # a kernel without time namespaces
        except OSError:
            return _UNKNOWN
    import zlib   # only for a limited launch (issue 15's start-up budget)
    token = f"{zlib.crc32(' '.join(parts).encode()):08x}"
    return token if token != _UNKNOWN else "00000001"


def identity() -> tuple[int, str]:
    """``(start, ns)`` of this process (read once per process: a fork reads its own)."""
    global _identity
    pid = os.getpid()
    if _identity is None or _identity[0] != pid:
        start = start_time("self")
        ns = _namespaces() if start is not None else _UNKNOWN
        _identity = (pid, (start or 0, ns))
    return _identity[1]


def name(n: int) -> str:
    """The name of this process's ``n``-th launch cgroup."""
    start, ns = identity()
    return f"{PREFIX}{os.getpid()}-{start}-{ns}-{n}-{os.urandom(4).hex()}"


def launcher_dead(entry: str) -> bool:
    """Whether ``entry`` is a name of this scheme, made in this process's namespaces, by a
    launcher that is dead now (see the module docstring). False when in doubt."""
    m = re.fullmatch(_NAME, entry)
    own_ns = identity()[1]
    if m is None or m.group(3) != own_ns or own_ns == _UNKNOWN:
        return False
    pid, start = int(m.group(1)), int(m.group(2))
    if pid >= 2**31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass   # alive, another user's process: its start time decides
    except OSError:
        return False
    now = start_time(pid)
    return now is not None and now != start


def sweep(parents) -> list[str]:
    """Remove the empty cgroups of dead launchers directly below each of ``parents``
    (directories). Returns the paths removed; never raises."""
    removed, kept = [], []
    uid = os.geteuid()
    for parent in dict.fromkeys(parents):
        try:
            fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            kept.append(f"{parent}: {exc.strerror}")
            continue
        try:
            with os.scandir(fd) as entries:
                names = [e.name for e in entries if e.name.startswith(PREFIX)]
            for entry in names:
                try:
                    st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or not launcher_dead(entry):
                        continue
                    os.rmdir(entry, dir_fd=fd)
                    removed.append(os.path.join(parent, entry))
                except FileNotFoundError:
                    continue   # removed meanwhile (its own launcher, another sweep)
                except OSError as exc:
                    if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        kept.append(f"{os.path.join(parent, entry)}: {exc.strerror}")
        except OSError as exc:
            kept.append(f"{parent}: {exc.strerror}")
        finally:
            os.close(fd)
    if removed or kept:
        from .trace import debug_logger
        log = debug_logger()
        if log is not None:
            log.debug("cgroup: removed leftovers of dead launchers: %s; could not sweep: %s",
                      ", ".join(removed) or "none", "; ".join(kept) or "none")
    return removed
