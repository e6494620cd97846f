"""Whether a path a sandboxed process named is on a read-only mount of its own view
(:mod:`pysandbox.denials`: the record of a refused write, made after the kernel
decided the call).

The path is resolved with ``openat2`` (``O_PATH``, ``RESOLVE_IN_ROOT |
RESOLVE_NO_MAGICLINKS``) from the process's root (``/proc/PID/root``) for an absolute
path, or from its working directory or the named directory descriptor for a relative
one, so no symlink of the sandbox leads outside its view; a missing last component is
looked up as its parent (a file the call would create), at most :data:`MAX_UP` levels.
Devices, fifos and sockets are not recorded: a read-only mount does not refuse opening
them for writing. Anything that fails to resolve is not recorded: the record is a
best effort over memory the command controls.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct

MAX_UP = 8
NR_OPENAT2 = 437
O_PATH = 0o10000000
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
ST_RDONLY = 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dirfd: int, path: bytes) -> int:
    how = struct.pack("=QQQ", O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(ctypes.c_long(NR_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(path),
                       ctypes.c_char_p(how), ctypes.c_size_t(len(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def base_fd(pid: int, dirfd: int, path: bytes) -> int:
    """An ``O_PATH`` descriptor of where ``path`` starts in process ``pid``'s view: its
    root, its working directory or its ``dirfd``. Taken before the call is answered, so
    the record survives the process's exit right after it.

    Raises:
        OSError: the process or its descriptor is gone.
    """
    base = "root" if path.startswith(b"/") else "cwd" if dirfd == -100 else f"fd/{dirfd}"
    return os.open(f"/proc/{pid}/{base}", O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)


def read_only_target(start: int, path: bytes) -> bool:
    """Whether ``path`` (as a process named it, from ``start``, a :func:`base_fd`) lies on a
    read-only mount of its view and is a file, directory or symlink there (or missing,
    under such a directory). False when unsure."""
    rel = path.lstrip(b"/") or b"."
    for _ in range(MAX_UP):
        try:
            fd = _openat2(start, rel)
        except OSError as exc:
            if exc.errno != errno.ENOENT or rel in (b".", b""):
                return False
            rel = os.path.dirname(rel.rstrip(b"/")) or b"."
            continue
        try:
            mode = os.fstat(fd).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                return False
            return bool(os.fstatvfs(fd).f_flag & ST_RDONLY)
        finally:
            os.close(fd)
    return False
