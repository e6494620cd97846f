"""The host facts the native translation needs, as one injectable view.

:class:`HostView` is everything :func:`~pysandbox.backends.native_ops.translate` asks of
the host: where the setup tmpfs goes, the highest capability number, whether
mount_setattr works (else the remount fallback and the host's mount points), which
/dev nodes exist and whether a bind source is a directory. Tests pass a fake one;
:func:`read_host` reads the real host for the backend.
"""

from __future__ import annotations

import os
import stat
from _collections_abc import Callable   # collections.abc: the same classes, after importing collections (issue 28)

from ...checks import CAPABILITIES
from ...ops import DEV_NODES
from ...records import dataclass


def source_is_dir(op) -> bool:
    """Whether a BindMount's source (path or descriptor) is a directory on the host; a
    descriptor that cannot be looked at counts as one."""
    if op.src_fd is not None:
        try:
            return stat.S_ISDIR(os.fstat(op.src_fd).st_mode)
        except OSError:
            return True
    return os.path.isdir(op.src)


@dataclass(frozen=True)
class HostView:
    """The host, as the translation sees it. The defaults are a neutral host except
    ``is_dir``, which looks at the real bind source (pass a function to fake it)."""

    base: str = "/tmp"                 # host directory the setup tmpfs is mounted on
    last_cap: int = 40                 # /proc/sys/kernel/cap_last_cap
    fallback: bool = False             # no mount_setattr: remount each submount instead
    mountpoints: tuple = ()            # the caller's mount points (only used with fallback)
    dev_nodes: tuple = DEV_NODES       # the /dev nodes that exist on the host
    is_dir: Callable = source_is_dir   # BindMount -> whether its source is a directory
    landlock_abi: int = 0              # the Landlock ABI the command's domain may use (landlock.py)


def read_mountpoints(path: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points of the caller's mount namespace, in mount order."""
    points = []
    with open(path, "rb") as f:
        for line in f:
            fields = line.split(b" ")
            raw = fields[4].decode("utf-8", "surrogateescape")
            points.append(raw.encode("latin-1", "ignore").decode("unicode_escape")
                          if "\\" in raw else raw)
    return points


def cap_last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return len(CAPABILITIES) - 1


def setup_base() -> str:
    """A directory of the host to mount the setup tmpfs on (in our own mount namespace)."""
    for cand in ("/tmp", "/run", "/mnt", "/var/tmp"):
        if os.path.isdir(cand) and not os.path.islink(cand):
            return cand
    return "/tmp"


def read_host(fallback: bool, landlock_abi: int = 0) -> HostView:
    """The real host. ``fallback``: mount_setattr is unusable (or disabled), so the
    mount points are read too. ``landlock_abi``: backends/landlock.py abi() (probed by
    the caller)."""
    return HostView(base=setup_base(), last_cap=cap_last_cap(), fallback=fallback,
                    mountpoints=tuple(read_mountpoints()) if fallback else (),
                    dev_nodes=tuple(n for n in DEV_NODES if os.path.exists(f"/dev/{n}")),
                    landlock_abi=landlock_abi)
