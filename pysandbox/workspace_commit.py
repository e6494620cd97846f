"""Applying a workspace's reviewed change set to the host project (Workspace.commit).

The layer was written by a command we do not trust, so commit:

- applies exactly the reviewed set: the layer is reviewed again and must equal what
  :meth:`Workspace.changes` returned (every entry's kind, mode, size, inode and ctime),
  else ``workspace_changed``; every file's content is copied from a descriptor whose
  ``fstat`` still matches the review before and after the copy;
- never writes outside the project: the project is opened once and every name below it
  is reached one name at a time with ``O_NOFOLLOW``; a symlink the command made is
  created as a symlink (never followed); a directory swapped for a symlink after the
  review is refused;
- never creates a setuid/setgid file or directory, a device node or a socket, and never
  copies an xattr (``security.capability``, ``user.overlay.*``): such entries are
  REFUSED (``workspace_unsafe_entry``, the paths named; commit the others with
  ``paths=``), so what is applied is what was reviewed. Files are created by the caller
  (owned by the caller's uid), mode & 0o777; hard links are committed as separate files;
- refuses git metadata outside the project's own ``.git`` (a nested repository's
  ``.git``, a bare repository's ``config``: pysandbox/workspace_git.py) unless ``allow_git``;
- refuses files larger than ``max_file_size`` (a sparse 100 GiB ``truncate``);
- raises :class:`WorkspaceConflict` when a host entry it would replace or delete has a
  ctime not before the workspace was opened (changed on the host since), unless it is
  still exactly as this workspace's own earlier commit left it;
- is crash-safe per entry. Phase 1 copies every file into a staging directory
  ``.pysandbox-commit-TOKEN`` in the project root (nothing is applied if any copy
  fails its check); phase 2 applies in pre-order, each file by one ``rename`` over the
  old one, each symlink and fifo made under a temporary name and renamed, then sets
  directory modes deepest first; phase 3 removes the staging directory. An interrupted commit leaves every entry old or new.
  To finish it: open the same layers again if the process lived (``ws.commit()`` again:
  what was applied now equals the layer and is no longer a change), then delete
  ``.pysandbox-commit-*`` in the project (and any ``.pysandbox-commit-*`` temporary
  names it left beside files).

Races with the host's own users (a file edited on the host after the conflict check,
before its rename) are not detected; a host file deleted since the workspace was
opened is not a conflict (the change is then an ``added``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat

from . import workspace_layer as L
from .errors import Reason, WorkspaceConflict, WorkspaceError
from .workspace_git import git_metadata

UNSAFE_TYPES = ("char", "block", "socket")
STAGE_PREFIX = ".pysandbox-commit-"


def _select(reviewed, paths):
    if paths is None:
        return list(reviewed)
    wanted = [tuple(os.fspath(p).strip("/").split("/")) for p in paths]
    by_path = {c.parts: c for c in reviewed}
    missing = [("/".join(w)) for w in wanted if w not in by_path]
    if missing:
        raise WorkspaceError("not a change of this workspace: " + ", ".join(map(L.show, missing)),
                             Reason.INVALID_PATH, missing)
    chosen = []
    for c in reviewed:
        parts = c.parts
        picked = any(parts[:len(w)] == w for w in wanted)
        # a new directory holding a chosen path comes with it
        needed = any(w[:len(parts)] == parts and c.kind in ("added", "type_changed") and c.type == "dir"
                     for w in wanted)
        if picked or needed:
            chosen.append(c)
    return chosen


def _refuse_unsafe(chosen, max_file_size):
    unsafe = [c.path for c in chosen if c.type in UNSAFE_TYPES
              or (c.mode is not None and c.mode & (stat.S_ISUID | stat.S_ISGID))]
    if unsafe:
        raise WorkspaceError("refused (setuid/setgid, device node or socket): " + ", ".join(map(L.show, unsafe)),
                             Reason.WORKSPACE_UNSAFE_ENTRY, unsafe)
    large = [c.path for c in chosen if c.type == "file" and c.size > max_file_size]
    if large:
        raise WorkspaceError(f"larger than {max_file_size} bytes: " + ", ".join(map(L.show, large)),
                             Reason.WORKSPACE_FILE_TOO_LARGE, large)


def _changed_since(project_fd, c, opened_ns, ours) -> bool:
    """Whether the host entry of ``c`` (a directory: or anything below it) changed since
    ``opened_ns``, other than by this workspace's own commits (``ours``: path -> stamp)."""
    if c.host_stamp is None:
        return False
    if c.host_stamp[5] >= opened_ns and ours.get(c.path) != c.host_stamp:
        return True
    if c.old_type == "dir" and c.kind in ("deleted", "type_changed"):
        fd = L.open_dir(project_fd, c.parts)
        if fd is None:
            return True
        try:
            for top, dirs, files, dfd in os.fwalk(".", dir_fd=fd):
                prefix = c.path if top == "." else c.path + "/" + top[2:]
                for name in dirs + files:
                    st = L.lstat_at(dfd, name)
                    if st is not None and st.st_ctime_ns >= opened_ns and ours.get(f"{prefix}/{name}") != L.stamp(st):
                        return True
        finally:
            os.close(fd)
    return False


def _record(ws, project_fd, chosen) -> None:
    """The host stamps this commit left, on what it wrote and the directories above it: a
    later commit of the same workspace does not take its own work for a conflict."""
    paths = {c.path for c in chosen}
    for c in chosen:
        paths.update("/".join(c.parts[:i]) for i in range(1, len(c.parts)))
    for path in paths:
        parts = tuple(path.split("/"))
        parent = L.open_dir(project_fd, parts[:-1])
        if parent is None:
            continue
        try:
            st = L.lstat_at(parent, parts[-1])
        finally:
            os.close(parent)
        if st is not None:
            ws._ours[path] = L.stamp(st)
        else:
            ws._ours.pop(path, None)


def commit(ws, paths, max_file_size, allow_git: bool = False) -> list:
    current = ws._compute()
    if ws._reviewed is None:
        ws._reviewed = current
    elif current != ws._reviewed:
        moved = sorted({c.path for c in current} ^ {c.path for c in ws._reviewed}
                       | {a.path for a, b in zip(current, ws._reviewed) if a != b})
        raise WorkspaceError("the layer changed since changes() reviewed it: review it again",
                             Reason.WORKSPACE_CHANGED, moved)
    chosen = _select(current, paths)
    _refuse_unsafe(chosen, max_file_size)
    layer_fds, project_fd = ws._open()
    try:
        git = [] if allow_git else git_metadata(chosen, current, project_fd)   # workspace_git.py
        if git:
            raise WorkspaceError("refused (git metadata: the host's git would obey it; allow_git=True, "
                                 "--allow-git, if you mean it): " + ", ".join(map(L.show, git)),
                                 Reason.WORKSPACE_UNSAFE_ENTRY, git)
        conflicts = [c.path for c in chosen if _changed_since(project_fd, c, ws.opened_ns, ws._ours)]
        if conflicts:
            raise WorkspaceConflict("changed on the host since the workspace was opened: "
                                    + ", ".join(map(L.show, conflicts)), Reason.WORKSPACE_CONFLICT, conflicts)
        try:
            _apply(chosen, layer_fds, project_fd)
        finally:
            _record(ws, project_fd, chosen)
    finally:
        for fd in layer_fds + [project_fd]:
            os.close(fd)
    _drop_from_layer(ws, chosen, paths)
    return chosen


def _copy(layer_fds, c, stage_fd, name):
    parent = L.open_dir(layer_fds[c.layer], c.parts[:-1])
    if parent is None:
        raise WorkspaceError(f"{L.show(c.path)}: the layer changed", Reason.WORKSPACE_CHANGED, (c.path,))
    try:
        src = L.open_file(parent, c.parts[-1], expect=c.stamp)
    except FileNotFoundError:
        raise WorkspaceError(f"{L.show(c.path)}: the layer changed", Reason.WORKSPACE_CHANGED, (c.path,)) from None
    finally:
        os.close(parent)
    try:
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=stage_fd)
        try:
            while True:
                chunk = os.read(src, 1 << 20)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
            os.fchmod(dst, c.mode & 0o777)
            os.fsync(dst)
        finally:
            os.close(dst)
        if L.stamp(os.fstat(src)) != c.stamp:
            raise WorkspaceError(f"{L.show(c.path)} changed while it was copied", Reason.WORKSPACE_CHANGED,
                                 (c.path,))
    finally:
        os.close(src)


def _layer_entry(layer_fds, c):
    """(parent fd in the layer, lstat) of ``c`` as reviewed, or workspace_changed."""
    parent = L.open_dir(layer_fds[c.layer], c.parts[:-1])
    st = L.lstat_at(parent, c.parts[-1]) if parent is not None else None
    if st is None or L.stamp(st) != c.stamp:
        if parent is not None:
            os.close(parent)
        raise WorkspaceError(f"{L.show(c.path)}: the layer changed", Reason.WORKSPACE_CHANGED, (c.path,))
    return parent


def _remove(parent_fd, name):
    st = L.lstat_at(parent_fd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)   # the fd-based walk: never follows a symlink
    else:
        os.unlink(name, dir_fd=parent_fd)


def _apply(chosen, layer_fds, project_fd):
    token = secrets.token_hex(6)
    stage = STAGE_PREFIX + token
    os.mkdir(stage, 0o700, dir_fd=project_fd)
    stage_fd = os.open(stage, L.DIR_FLAGS, dir_fd=project_fd)
    try:
        for i, c in enumerate(chosen):            # phase 1: every file's content, checked
            if c.type == "file" and c.kind != "mode_changed":
                _copy(layer_fds, c, stage_fd, str(i))
        for i, c in enumerate(chosen):            # phase 2: one entry at a time, pre-order
            parent = L.open_dir(project_fd, c.parts[:-1])
            if parent is None:
                raise WorkspaceError(f"{L.show(c.path)}: its host directory is gone or was replaced",
                                     Reason.WORKSPACE_CONFLICT, (c.path,))
            try:
                _apply_one(c, i, parent, stage_fd, layer_fds, f"{stage}-{i}")
            finally:
                os.close(parent)
        # phase 2b: directory modes last, deepest first, so that a directory the command
        # made read-only (0555) still took what goes in it
        for c in reversed([c for c in chosen if c.type == "dir" and c.kind != "deleted"]):
            fd = L.open_dir(project_fd, c.parts)
            if fd is None:
                raise WorkspaceError(f"{L.show(c.path)}: replaced on the host during the commit",
                                     Reason.WORKSPACE_CONFLICT, (c.path,))
            try:
                os.fchmod(fd, c.mode & 0o777)
            finally:
                os.close(fd)
    finally:
        os.close(stage_fd)
        shutil.rmtree(stage, dir_fd=project_fd)


def _apply_one(c, i, parent, stage_fd, layer_fds, tmp):
    name = c.parts[-1]
    if c.kind == "deleted":
        _remove(parent, name)
        return
    if c.kind == "mode_changed" and c.type == "dir":
        return   # phase 2b
    if c.kind == "mode_changed":
        flags = L.FILE_FLAGS
        fd = os.open(name, flags, dir_fd=parent)
        try:
            if L.type_of(os.fstat(fd).st_mode) != c.type:
                raise WorkspaceError(f"{L.show(c.path)} changed on the host", Reason.WORKSPACE_CONFLICT, (c.path,))
            os.fchmod(fd, c.mode & 0o777)
        finally:
            os.close(fd)
        return
    if c.kind == "type_changed":
        _remove(parent, name)
    if c.type == "dir":
        os.mkdir(name, 0o700, dir_fd=parent)   # its mode in phase 2b
    elif c.type == "file":
        os.rename(str(i), name, src_dir_fd=stage_fd, dst_dir_fd=parent)
    elif c.type == "symlink":
        lparent = _layer_entry(layer_fds, c)
        try:
            target = os.readlink(name, dir_fd=lparent)
        finally:
            os.close(lparent)
        os.symlink(target, tmp, dir_fd=parent)
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    elif c.type == "fifo":
        os.mkfifo(tmp, 0o600, dir_fd=parent)
        fd = os.open(tmp, L.FILE_FLAGS, dir_fd=parent)
        try:
            os.fchmod(fd, c.mode & 0o777)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    else:   # _refuse_unsafe let nothing else through
        raise WorkspaceError(f"{L.show(c.path)}: cannot commit a {c.type}", Reason.WORKSPACE_UNSAFE_ENTRY,
                             (c.path,))


def _drop_from_layer(ws, chosen, paths):
    """After a commit the committed entries are the host's: a full commit empties the
    upper layer; a partial one leaves the rest (what was committed now equals the host
    and is no longer a change)."""
    if paths is None and not ws._lowers:
        ws.discard()

