"""The Policy's filesystem operations: frozen, validated records applied in order
(as bubblewrap applies its options), a later one on a path shadowing an earlier one.
They name host paths and sandbox paths; :mod:`pysandbox.plan` compiles them into the
plan's operations (:mod:`pysandbox.ops`)."""

from __future__ import annotations

import os

from .checks import (as_tuple, canonical, check_fd, check_mode, check_path, check_size, set_field,
                     validated)
from .errors import PolicyError, Reason
from .records import dataclass


@validated
@dataclass(frozen=True)
class Bind:
    """Bind the host path ``src`` on ``dest``. ``readonly`` applies to every submount;
    ``dev`` keeps device nodes usable; ``optional`` skips a missing source (bwrap -try).
    ``src_fd`` binds an open descriptor instead of a path (bwrap --bind-fd).
    ``src`` is kept canonical (:func:`canonical`): a symlink named here is resolved
    now, and the launch binds that path without following any symlink in it. The path
    as named stays in ``named_src`` (not a field): the Policy refuses one that passes
    through a symlink inside a path it makes writable (:mod:`pysandbox.writable`)."""

    src: str | None
    dest: str
    readonly: bool = False
    dev: bool = False
    optional: bool = False
    src_fd: int | None = None

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "bind destination"))
        if self.src_fd is not None:
            if self.src is not None:
                raise PolicyError("bind takes a source path or a descriptor, not both",
                                  Reason.CONFLICTING_OPTIONS, self.src)
            set_field(self, "src_fd", check_fd(self.src_fd, "bind source descriptor"))
        else:
            # What a symlink the caller named points to NOW: the launch then binds this
            # path without following any symlink (one planted later fails closed).
            named = check_path(self.src, "bind source")
            set_field(self, "named_src", named)
            set_field(self, "src", canonical(named))
        for flag in ("readonly", "dev", "optional"):
            if not isinstance(getattr(self, flag), bool):
                raise PolicyError(f"bind {flag} must be a bool", Reason.INVALID_VALUE, getattr(self, flag))


@validated
@dataclass(frozen=True)
class Tmpfs:
    dest: str
    size: int | None = None
    mode: int | None = None

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "tmpfs destination"))
        set_field(self, "size", check_size(self.size))
        set_field(self, "mode", check_mode(self.mode, "tmpfs mode"))


@validated
@dataclass(frozen=True)
class Proc:
    dest: str = "/proc"

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "proc destination"))


@validated
@dataclass(frozen=True)
class Dev:
    """A minimal /dev: null zero full random urandom tty, fd links, devpts, shm."""

    dest: str = "/dev"

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "dev destination"))


@validated
@dataclass(frozen=True)
class Mqueue:
    dest: str = "/dev/mqueue"

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "mqueue destination"))


@validated
@dataclass(frozen=True)
class Dir:
    dest: str
    mode: int | None = None

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "dir"))
        set_field(self, "mode", check_mode(self.mode, "dir mode"))


@validated
@dataclass(frozen=True)
class Symlink:
    target: str
    dest: str

    def __post_init__(self):
        if not isinstance(self.target, str) or not self.target or "\x00" in self.target:
            raise PolicyError(f"symlink target must be a non-empty string without NUL: {self.target!r}",
                              Reason.INVALID_PATH, self.target)
        set_field(self, "dest", check_path(self.dest, "symlink"))


@validated
@dataclass(frozen=True)
class File:
    """A new file at ``dest`` holding ``data`` (bytes) or what is read from ``fd``.

    ``bind`` makes it a file of its own bind-mounted on dest (bwrap --bind-data),
    ``readonly`` with it (bwrap --ro-bind-data); without ``bind`` it is written in
    place (bwrap --file)."""

    dest: str
    data: bytes | None = None
    fd: int | None = None
    mode: int | None = None
    bind: bool = False
    readonly: bool = False

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "file"))
        if (self.data is None) == (self.fd is None):
            raise PolicyError("file takes exactly one of data or fd", Reason.CONFLICTING_OPTIONS, self.dest)
        if self.data is not None:
            if isinstance(self.data, str):
                set_field(self, "data", self.data.encode())
            elif not isinstance(self.data, (bytes, bytearray)):
                raise PolicyError("file data must be bytes", Reason.INVALID_VALUE, self.data)
            else:
                set_field(self, "data", bytes(self.data))
        else:
            set_field(self, "fd", check_fd(self.fd, "file descriptor"))
        set_field(self, "mode", check_mode(self.mode, "file mode"))
        if self.readonly and not self.bind:
            raise PolicyError("a read-only file must be bind-mounted (bind=True)",
                              Reason.CONFLICTING_OPTIONS, self.dest)


@validated
@dataclass(frozen=True)
class RemountRo:
    """Make the mount at ``dest`` read-only (not recursive, as bwrap --remount-ro)."""

    dest: str

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "remount-ro"))


@validated
@dataclass(frozen=True)
class Chmod:
    dest: str
    mode: int = 0o755

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "chmod path"))
        set_field(self, "mode", check_mode(self.mode, "chmod mode"))
        if self.mode is None:
            raise PolicyError("chmod needs a mode", Reason.INVALID_MODE, None)


@validated
@dataclass(frozen=True)
class Hide:
    """Cover ``path`` with an empty, read-only, inaccessible node (never created on the host).
    A path that does not exist is already hidden and is skipped; on the native backend,
    one that existed when the plan was made and cannot be reached at launch for any
    reason but having vanished (its last component missing) fails the launch."""

    path: str

    def __post_init__(self):
        set_field(self, "path", check_path(self.path, "hide path"))
        if self.path == "/":
            raise PolicyError("hide path '/' would hide the whole sandbox (nothing would be left to run): "
                              "name what to hide", Reason.INVALID_PATH, "/", field="hide")


@validated
@dataclass(frozen=True)
class Overlay:
    """An overlayfs on ``dest``: the host directories ``lower`` merged, the FIRST given
    at the bottom and the last on top (bubblewrap's ``--overlay-src`` order).

    Writes go to the host directory ``upper`` (with ``work``, an empty directory on the
    same filesystem, for the kernel's use: bwrap --overlay), or with ``tmp=True`` to an
    invisible tmpfs that vanishes with the sandbox (bwrap --tmp-overlay). With neither
    the overlay is read-only and needs at least two lowers (bwrap --ro-overlay).
    Mounted nosuid,nodev (bwrap sets neither: stricter). The layers are kept canonical,
    as a bind's source; as named they stay in ``named_sources`` (not a field; the order
    of :attr:`sources`)."""

    dest: str
    lower: tuple[str, ...] = ()
    upper: str | None = None
    work: str | None = None
    tmp: bool = False

    def __post_init__(self):
        set_field(self, "dest", check_path(self.dest, "overlay destination"))
        if isinstance(self.lower, (str, bytes, os.PathLike)):
            raise PolicyError("overlay lower must be a collection of paths, not one path",
                              Reason.INVALID_VALUE, self.lower)
        named = tuple(check_path(p, "overlay lower dir") for p in as_tuple(self.lower, "overlay lower"))
        lower = tuple(canonical(p) for p in named)
        set_field(self, "lower", lower)
        if not isinstance(self.tmp, bool):
            raise PolicyError("overlay tmp must be a bool", Reason.INVALID_VALUE, self.tmp)
        if (self.upper is None) != (self.work is None):
            raise PolicyError("an overlay takes both an upper and a work directory, or neither",
                              Reason.CONFLICTING_OPTIONS, (self.upper, self.work))
        if self.upper is not None:
            if self.tmp:
                raise PolicyError("a tmp overlay writes to a tmpfs: it takes no upper or work directory",
                                  Reason.CONFLICTING_OPTIONS, self.upper)
            layers = (check_path(self.upper, "overlay upper dir"), check_path(self.work, "overlay work dir"))
            named += layers
            set_field(self, "upper", canonical(layers[0]))
            set_field(self, "work", canonical(layers[1]))
        set_field(self, "named_sources", named)
        least = 2 if self.upper is None and not self.tmp else 1
        if len(lower) < least:
            what = "a read-only overlay needs at least two lower directories" if least == 2 else \
                "an overlay needs at least one lower directory"
            raise PolicyError(what, Reason.INVALID_VALUE, lower)

    @property
    def writable(self) -> bool:
        """Writes reach the host (an upper directory)."""
        return self.upper is not None

    @property
    def sources(self) -> tuple[str, ...]:
        """The host directories it uses: lowers, then upper and work."""
        return self.lower + ((self.upper, self.work) if self.upper is not None else ())


FsOp = Bind | Tmpfs | Proc | Dev | Mqueue | Dir | Symlink | File | RemountRo | Chmod | Hide | Overlay
FS_OP_TYPES = (Bind, Tmpfs, Proc, Dev, Mqueue, Dir, Symlink, File, RemountRo, Chmod, Hide, Overlay)


def fs_dest(op: FsOp) -> str:
    return op.path if isinstance(op, Hide) else op.dest


def check_bind_source(op: Bind) -> None:
    """A bind source must exist unless the bind is optional (checked before any launch)."""
    if op.src is None or op.optional:
        return
    if not os.path.lexists(op.src):
        raise PolicyError(f"bind source does not exist: {op.src}", Reason.BIND_SOURCE_MISSING, op.src)


def check_overlay_sources(op: Overlay) -> None:
    """Every directory of an overlay must exist on the host (checked before any launch,
    as a bind source: ``bind_source_missing``)."""
    for src in op.sources:
        if not os.path.lexists(src):
            raise PolicyError(f"overlay source does not exist: {src}", Reason.BIND_SOURCE_MISSING, src)
