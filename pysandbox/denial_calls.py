"""Which system calls the denial observer sees (``Policy(report_denials=True)``,
:mod:`pysandbox.denials`): pure data, shared by the filter that pre-selects them
(:func:`pysandbox.seccomp.default_filter` with ``report=True``) and the observer that
reads their arguments.

Write intent, x86_64 only (the i386 ABI's calls are not observed): each call with the
arguments that name a path, as ``(dirfd argument or None, path argument)`` pairs. ``open``
and ``openat`` are pre-selected only with a write flag (:data:`WRITE_FLAGS`) and
``utimensat`` only with a path; every other call here always.
"""

from __future__ import annotations

AT_FDCWD = -100
# O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND (the low bits of the flags argument)
WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000
# name: (x86_64 number, ((dirfd arg | None, path arg), ...))
WRITE_CALLS = {
    "open": (2, ((None, 0),)), "openat": (257, ((0, 1),)), "creat": (85, ((None, 0),)),
    "truncate": (76, ((None, 0),)), "rename": (82, ((None, 0), (None, 1))), "mkdir": (83, ((None, 0),)),
    "rmdir": (84, ((None, 0),)), "link": (86, ((None, 1),)), "unlink": (87, ((None, 0),)),
    "symlink": (88, ((None, 1),)), "chmod": (90, ((None, 0),)), "chown": (92, ((None, 0),)),
    "lchown": (94, ((None, 0),)), "mknod": (133, ((None, 0),)), "setxattr": (188, ((None, 0),)),
    "lsetxattr": (189, ((None, 0),)), "removexattr": (197, ((None, 0),)), "lremovexattr": (198, ((None, 0),)),
    "utimes": (235, ((None, 0),)), "mkdirat": (258, ((0, 1),)), "mknodat": (259, ((0, 1),)),
    "fchownat": (260, ((0, 1),)), "futimesat": (261, ((0, 1),)), "unlinkat": (263, ((0, 1),)),
    "renameat": (264, ((0, 1), (2, 3))), "linkat": (265, ((2, 3),)), "symlinkat": (266, ((1, 2),)),
    "fchmodat": (268, ((0, 1),)), "utimensat": (280, ((0, 1),)), "renameat2": (316, ((0, 1), (2, 3))),
    "fchmodat2": (452, ((0, 1),)),
}
# Pre-selected only when an argument says so: (flags argument) / (path argument non-NULL).
FLAGGED_CALLS = {"open": 1, "openat": 2}
PATH_NONNULL_CALLS = {"utimensat": 1}
ALWAYS_CALLS = tuple(name for name in WRITE_CALLS if name not in FLAGGED_CALLS and name not in PATH_NONNULL_CALLS)
CONNECT_NR = 42   # x86_64 connect(fd, addr, addrlen); observed in network deny and proxy mode
BY_NR = {nr: (name, paths) for name, (nr, paths) in WRITE_CALLS.items()}
