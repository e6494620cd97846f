"""The host side of a sandbox run shared by the differential, compat and security tests.

A :class:`World` is a private directory tree that policies bind from (``TREE``, created
by the test, removed after), and the descriptors a policy may name (``DATA_FD``: a pipe
holding ``FD_DATA``; ``DIR_FD``: an O_PATH directory; ``PASS_FD``: /dev/null, for
pass_fds). Descriptors are opened afresh for every launch so each backend reads the
same bytes. ``caller_namespaces`` and ``host_devs`` are the caller's namespace inodes
and mounted devices, which a probe report is judged against
(tests/support/probe_normalise.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

DATA_FD, DIR_FD, PASS_FD = 240, 241, 242
FD_DATA = b"data from a descriptor\n"

# The host tree every policy binds from: relative path -> (type, mode, data).
TREE = {
    "src": ("d", 0o755, None),
    "src/sub1": ("d", 0o755, None),
    "src/sub1/deep": ("d", 0o755, None),
    "src/sub1/deep/f": ("f", 0o644, b"deep\n"),
    "src/sub2": ("d", 0o750, None),
    "src/f1": ("f", 0o644, b"one\n"),
    "src/f2": ("f", 0o600, b"two\n"),
    "src/exe": ("f", 0o755, b"#!/bin/sh\necho hi\n"),
    "srcB": ("d", 0o755, None),
    "srcB/x": ("d", 0o755, None),
    "srcB/y": ("f", 0o644, b"why\n"),
    "fileC": ("f", 0o644, b"c\n"),
    "empty": ("d", 0o755, None),
}


@dataclass
class World:
    base: str

    @classmethod
    def create(cls) -> "World":
        base = tempfile.mkdtemp(prefix="psbdiff-")
        os.chmod(base, 0o755)
        for rel, (kind, mode, data) in TREE.items():
            path = os.path.join(base, rel)
            if kind == "d":
                os.mkdir(path)
            else:
                with open(path, "wb") as f:
                    f.write(data)
            os.chmod(path, mode)
        os.mkdir(os.path.join(base, "private-tmp"), 0o700)
        return cls(base)

    @property
    def private_tmp(self) -> str:
        """The temporary directory during launches: nobody else writes there."""
        return os.path.join(self.base, "private-tmp")

    def path(self, rel: str) -> str:
        return os.path.join(self.base, rel) if rel else self.base

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def open_fds(self) -> list[int]:
        """(Re)open DATA_FD, DIR_FD and PASS_FD, not inheritable. Returns them."""
        r, w = os.pipe()
        os.write(w, FD_DATA)
        os.close(w)
        sources = {DATA_FD: r,
                   DIR_FD: os.open(self.path("srcB"), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC),
                   PASS_FD: os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)}
        for target, fd in sources.items():
            os.dup2(fd, target, inheritable=False)
            os.close(fd)
        return list(sources)

    @staticmethod
    def close_fds(fds) -> None:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def caller_namespaces() -> dict[str, int]:
    out = {}
    for name in ("user", "mnt", "pid", "ipc", "uts", "net", "cgroup"):
        try:
            out[name] = os.stat(f"/proc/self/ns/{name}").st_ino
        except OSError:
            pass
    return out


def host_devs() -> frozenset:
    with open("/proc/self/mountinfo") as f:
        return frozenset(line.split(" ")[2] for line in f)
