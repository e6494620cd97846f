"""Reading a workspace's layers as overlayfs merges them, and comparing the result with
the host project: :func:`changes` and :func:`diff` (workspace.py).

Everything here runs in the caller's process, on layers a sandboxed command wrote. Every
name is opened relative to a directory descriptor with ``O_NOFOLLOW`` (and
``O_DIRECTORY`` for directories; regular files with ``O_NONBLOCK`` and checked with
``fstat`` after the open, so a swapped-in fifo never blocks us), so nothing the command
made is followed and no path is ever longer than one name (nesting past ``PATH_MAX``).

What overlayfs itself wrote is obeyed, and only that: a whiteout is a character device
0/0; an opaque directory carries ``user.overlay.opaque=y`` (our mounts always use
``userxattr``). A command's own ``user.overlay.*`` xattrs are stored by the kernel
renamed (``user.overlay.overlay.*``) and are data: never read here, never committed.
"""

from __future__ import annotations

import difflib
import errno as E
import os
import stat
from dataclasses import dataclass, field

from .errors import Reason, WorkspaceError

KINDS = ("added", "modified", "deleted", "type_changed", "mode_changed")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
OPAQUE = "user.overlay.opaque"
DIFF_MAX = 1 << 20     # a file larger than this is named in diff(), not shown
_CHUNK = 1 << 16


def type_of(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "char"), (stat.S_ISBLK, "block"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "unknown"


def stamp(st) -> tuple:
    """What identifies one state of an entry: a write changes ctime, a swap the inode."""
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Change:
    """One changed path of a workspace, relative to the project (``/``-separated; a
    non-UTF-8 byte is a surrogate escape, as :func:`os.fsdecode` makes it). ``kind`` is
    one of ``added``, ``modified``, ``deleted``, ``type_changed``, ``mode_changed``;
    ``type``/``old_type`` one of ``file``, ``dir``, ``symlink``, ``fifo``, ``char``,
    ``block``, ``socket`` (None where absent); ``mode``/``old_mode`` the permission bits
    with setuid/setgid/sticky; ``size``/``old_size`` in bytes (None for directories)."""

    path: str
    kind: str
    type: str | None
    old_type: str | None
    mode: int | None
    old_mode: int | None
    size: int | None
    old_size: int | None
    layer: int | None = field(default=None, repr=False)     # index into the layers (None: deleted)
    stamp: tuple | None = field(default=None, repr=False)   # the layer entry as reviewed
    host_stamp: tuple | None = field(default=None, repr=False)  # the host entry as reviewed

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.path.split("/"))


def open_dir(root_fd: int, parts) -> int | None:
    """A descriptor of the directory ``parts`` below ``root_fd``, walked one name at a
    time without following; None where a name is missing or is not a directory."""
    fd = os.dup(root_fd)
    try:
        for name in parts:
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (E.ENOENT, E.ENOTDIR, E.ELOOP):
                    return None
                raise
            os.close(fd)
            fd = nfd
        nfd, fd = fd, -1
        return nfd
    finally:
        if fd >= 0:
            os.close(fd)


def lstat_at(dir_fd: int | None, name: str):
    if dir_fd is None:
        return None
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def is_whiteout(st) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(dir_fd: int, name: str) -> bool:
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        return os.getxattr(fd, OPAQUE) == b"y"
    except OSError as exc:
        if exc.errno in (E.ENODATA, E.ENOTSUP):
            return False
        raise
    finally:
        os.close(fd)


def open_file(dir_fd: int, name: str, expect=None) -> int:
    """A regular file opened without following or blocking; ``expect``: the stamp it must
    still have (else ``workspace_changed``)."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (expect is not None and stamp(st) != expect):
        os.close(fd)
        raise WorkspaceError(f"{name!r} changed since it was reviewed", Reason.WORKSPACE_CHANGED, (name,))
    return fd


def _same_content(a_fd: int, b_fd: int) -> bool:
    while True:
        a, b = os.read(a_fd, _CHUNK), os.read(b_fd, _CHUNK)
        if a != b:
            return False
        if not a:
            return True


def _compare(upper_fd, name, st, host_fd, hst) -> str | None:
    """The kind of change from host entry ``hst`` to layer entry ``st`` (same name), or None."""
    t, ht = type_of(st.st_mode), type_of(hst.st_mode)
    if t != ht:
        return "type_changed"
    content = True
    if t == "file":
        if st.st_size != hst.st_size:
            content = False
        else:
            a, b = open_file(upper_fd, name), open_file(host_fd, name)
            try:
                content = _same_content(a, b)
            finally:
                os.close(a)
                os.close(b)
    elif t == "symlink":
        content = os.readlink(name, dir_fd=upper_fd) == os.readlink(name, dir_fd=host_fd)
    elif t in ("char", "block"):
        content = st.st_rdev == hst.st_rdev
    if not content:
        return "modified"
    if stat.S_IMODE(st.st_mode) != stat.S_IMODE(hst.st_mode):
        return "mode_changed"
    return None


def changes(layer_fds: list[int], project_fd: int) -> list[Change]:
    """The change set of the merged ``layer_fds`` (bottom first; the project below them
    all) against the project, in pre-order (a directory before what it holds).

    Raises:
        WorkspaceError: ``workspace_layer_invalid`` when a layer holds a symlink where it
            held a directory a moment earlier (it changed under the review).
    """
    out: list[Change] = []
    top_first = list(range(len(layer_fds) - 1, -1, -1))
    # (parts, layer indices top first holding this merged dir, host dir shows through, host has dir)
    work = [((), top_first, True, True)]
    while work:
        parts, layers, reaches, host_has = work.pop()
        fds, host_fd = {}, None
        try:
            for li in layers:
                fd = open_dir(layer_fds[li], parts)
                if fd is None:
                    raise WorkspaceError(f"layer directory {'/'.join(parts)!r} changed during the review",
                                         Reason.WORKSPACE_LAYER_INVALID, ("/".join(parts),))
                fds[li] = fd
            if host_has:
                host_fd = open_dir(project_fd, parts)
            names = sorted({n for fd in fds.values() for n in os.listdir(fd)})
            merged = set()
            below = []
            for name in names:
                rel = "/".join(parts + (name,))
                top = st = None
                for li in layers:
                    st = lstat_at(fds[li], name)
                    if st is not None:
                        top = li
                        break
                if top is None:   # vanished while we looked
                    raise WorkspaceError(f"{rel!r} changed during the review", Reason.WORKSPACE_LAYER_INVALID, (rel,))
                hst = lstat_at(host_fd, name)
                if is_whiteout(st):
                    if reaches and hst is not None:
                        out.append(_deleted(rel, hst))
                    continue
                merged.add(name)
                t = type_of(st.st_mode)
                size = None if t == "dir" else st.st_size
                entry = dict(path=rel, type=t, mode=stat.S_IMODE(st.st_mode), size=size, layer=top,
                             stamp=stamp(st), host_stamp=stamp(hst) if hst is not None else None)
                if hst is None:
                    out.append(Change(kind="added", old_type=None, old_mode=None, old_size=None, **entry))
                else:
                    kind = _compare(fds[top], name, st, host_fd, hst)
                    if kind is not None:
                        ht = type_of(hst.st_mode)
                        out.append(Change(kind=kind, old_type=ht, old_mode=stat.S_IMODE(hst.st_mode),
                                          old_size=None if ht == "dir" else hst.st_size, **entry))
                if t == "dir":
                    chain, stopped = [top], _is_opaque(fds[top], name)
                    for li in layers[layers.index(top) + 1:]:
                        if stopped:
                            break
                        lst = lstat_at(fds[li], name)
                        if lst is None:
                            continue
                        if not stat.S_ISDIR(lst.st_mode):
                            stopped = True
                            break
                        chain.append(li)
                        stopped = _is_opaque(fds[li], name)
                    host_dir = hst is not None and stat.S_ISDIR(hst.st_mode)
                    below.append((parts + (name,), chain, reaches and not stopped and host_dir, host_dir))
            if host_fd is not None and not reaches:
                for name in sorted(os.listdir(host_fd)):
                    if name not in merged:   # hidden by an opaque directory or a whiteout
                        hst = lstat_at(host_fd, name)
                        if hst is not None:
                            out.append(_deleted("/".join(parts + (name,)), hst))
            work.extend(reversed(below))
        finally:
            for fd in fds.values():
                os.close(fd)
            if host_fd is not None:
                os.close(host_fd)
    return _preorder(out)


def _deleted(rel, hst) -> Change:
    ht = type_of(hst.st_mode)
    return Change(rel, "deleted", None, ht, None, stat.S_IMODE(hst.st_mode), None,
                  None if ht == "dir" else hst.st_size, host_stamp=stamp(hst))


def _preorder(out: list[Change]) -> list[Change]:
    seen, result = set(), []
    for c in sorted(out, key=lambda c: c.parts):
        if c.path not in seen:
            seen.add(c.path)
            result.append(c)
    return result


def show(path: str) -> str:
    """A path as one printable line: non-UTF-8 bytes and control characters escaped."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def read_text(dir_fd: int | None, name: str, size: int | None):
    """(text or None when binary or too large, why)."""
    if dir_fd is None or size is None:
        return "", None
    if size > DIFF_MAX:
        return None, "large"
    fd = open_file(dir_fd, name)
    try:
        data = b"".join(iter(lambda: os.read(fd, _CHUNK), b""))
    finally:
        os.close(fd)
    if b"\0" in data[:8192]:
        return None, "binary"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "binary"


def diff(items: list[Change], layer_fds: list[int], project_fd: int) -> str:
    """A unified diff of the text files among ``items``; other files are named."""
    chunks = []
    for c in items:
        if "file" not in (c.type, c.old_type) or c.kind == "mode_changed":
            if c.kind == "mode_changed":
                chunks.append(f"mode {show(c.path)}: {c.old_mode:04o} -> {c.mode:04o}\n")
            continue
        parent = c.parts[:-1]
        name = c.parts[-1]
        new_dir = open_dir(layer_fds[c.layer], parent) if c.type == "file" else None
        old_dir = open_dir(project_fd, parent) if c.old_type == "file" else None
        try:
            new, why_new = read_text(new_dir, name, c.size if c.type == "file" else None)
            old, why_old = read_text(old_dir, name, c.old_size if c.old_type == "file" else None)
        finally:
            for fd in (new_dir, old_dir):
                if fd is not None:
                    os.close(fd)
        label = show(c.path)
        if new is None or old is None:
            chunks.append(f"Binary or large files a/{label} and b/{label} differ ({why_new or why_old})\n")
            continue
        a = "/dev/null" if c.old_type != "file" else f"a/{label}"
        b = "/dev/null" if c.type != "file" else f"b/{label}"
        lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b)
        chunks.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                              for line in lines))
    return "".join(chunks)
