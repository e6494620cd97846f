"""Workspaces: an overlay view of a project whose writes land in a layer the Workspace
owns, reviewed (:meth:`Workspace.changes`, :meth:`Workspace.diff`), committed or
discarded, snapshotted and forked (README.md, "Workspaces"; docs/ARCHITECTURE.md).

    ws = pysandbox.Workspace("project")
    pysandbox.run(["make"], policy=pysandbox.Policy.default(workdir=ws))
    for c in ws.changes(): print(c.kind, c.path)
    ws.commit()          # or ws.discard()

Layout: a store directory made by :func:`tempfile.mkdtemp` (mode 0700, in the host's
temporary directory unless ``store_dir`` says where) holds ``upper`` and ``work`` (the
overlay's) and ``layers/N`` (frozen snapshots). Every policy built with the workspace
mounts ``overlay(lower=project + snapshots, upper)`` on the project's own path and hides
the store directories of every layer it uses (their paths are named in the sandbox's
mountinfo and would be readable through the read-only host root). The layer is never a
path any sandbox can write except through its overlay.

One live sandbox per workspace at a time: overlayfs does not define two mounts sharing
an upper directory, and :meth:`snapshot`, :meth:`commit`, :meth:`discard` are for
between commands (fork a snapshot to run in parallel).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import weakref

from .errors import PolicyError, Reason, WorkspaceError
from . import workspace_layer as L


def rmtree(path: str) -> None:
    """Remove a layer directory, whatever modes the command left in it (overlayfs's own
    work/work is mode 000): a directory that refuses is made 0700 once and retried."""
    fixed = set()

    def retry(func, p, exc):
        if p in fixed or not isinstance(exc[1], PermissionError):
            raise exc[1]
        fixed.add(p)
        for d in (os.path.dirname(p), p):
            _own_dir_0700(d)
        if func is os.rmdir or func is os.unlink:
            func(p)
        else:
            _rmtree(p, retry)
    if os.path.lexists(path):
        _rmtree(path, retry)


def _rmtree(path, handler) -> None:
    if sys.version_info >= (3, 12):   # onerror is deprecated there
        shutil.rmtree(path, onexc=lambda func, p, exc: handler(func, p, (type(exc), exc, None)))
    else:
        shutil.rmtree(path, onerror=handler)


def _own_dir_0700(path: str) -> None:
    """chmod 0700 a directory without following its last name (an O_PATH descriptor:
    no permission on the directory itself is needed to name it)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if os.path.isdir(f"/proc/self/fd/{fd}") and not os.path.islink(path):
            os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError:
        pass
    finally:
        os.close(fd)


class Workspace:
    """An overlay view of the directory ``path`` (its canonical path). Pass it as the
    workdir of :meth:`Policy.default`: commands see the project at its own path,
    writable, and every write lands in the workspace's layer until :meth:`commit`.

    ``store_dir``: where the store is made (default: the temporary directory, which every
    default policy covers with its private ``/tmp``); choose one no policy makes writable.

    Raises:
        PolicyError: ``invalid_path`` when ``path`` is not a directory,
            ``workdir_too_broad`` for ``/``, ``conflicting_options`` for a store inside the project.
        OSError: the store cannot be made.
    """

    def __init__(self, path, *, store_dir=None, _lowers=(), _hidden=(), _opened=None, _base=None):
        project = os.path.realpath(os.fspath(path))
        if project == "/":
            raise PolicyError("a workspace of '/' would overlay the whole host", Reason.WORKDIR_TOO_BROAD, project)
        if not os.path.isdir(project):
            raise PolicyError(f"workspace {path}: not a directory", Reason.INVALID_PATH, path)
        parent = os.path.realpath(os.fspath(store_dir) if store_dir is not None else tempfile.gettempdir())
        if parent == project or parent.startswith(project.rstrip("/") + "/"):
            raise PolicyError(f"the workspace's store {parent} is inside the project: the command would see its "
                              "own layer through the project", Reason.CONFLICTING_OPTIONS, parent)
        self.project = project
        self.store = tempfile.mkdtemp(prefix="pysandbox-ws-", dir=parent)   # 0700
        for name in ("upper", "work", "layers"):
            os.mkdir(os.path.join(self.store, name), 0o700)
        self._lowers = tuple(_lowers)
        self._hidden = tuple(_hidden) + (self.store,)
        marker = os.path.join(self.store, "opened")
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        # Conflicts are host entries whose ctime is not before this (the kernel's clock, as
        # theirs). The marker's ctime is queried, then changed: on a multigrain-timestamp
        # kernel (6.13+) that change takes a fine-grained ctime and raises the floor every
        # later change is stamped at or above, so an entry changed in the same clock tick
        # before the open is not a conflict and one changed after it is.
        os.stat(marker)
        os.utime(marker)
        self.opened_ns = _opened if _opened is not None else os.stat(marker).st_ctime_ns
        self._reviewed: list[L.Change] | None = None
        self._snapshots = 0
        self._ours: dict = {}       # path -> host stamp our own commits left (workspace_commit._record)
        self._base = _base          # the snapshot a fork starts from: its layers outlive the fork
        # The store goes with the object (or at exit) unless remove() came first.
        self._finalizer = weakref.finalize(self, rmtree, self.store)

    # -- the view -----------------------------------------------------------------------------

    @property
    def upper(self) -> str:
        return os.path.join(self.store, "upper")

    @property
    def layers(self) -> tuple[str, ...]:
        """The layers above the project, bottom first: snapshots, then the upper."""
        return self._lowers + (self.upper,)

    def policy_ops(self, overrides: dict):
        """The filesystem operations a policy needs: ``[(key path, rank, op)]`` as
        :meth:`Policy.default` sorts them (the overlay, then the hides); the project is
        the start directory unless ``overrides`` names one."""
        overrides.setdefault("chdir", self.project)
        from .fs import Hide, Overlay
        ops = [(self.project, 0, Overlay(self.project, (self.project,) + self._lowers, self.upper,
                                         os.path.join(self.store, "work")))]
        return ops + [(d, 2, Hide(d)) for d in self._hidden]

    # -- review ---------------------------------------------------------------------------------

    def _open(self):
        fds = []
        try:
            for d in self.layers:
                fds.append(os.open(d, L.DIR_FLAGS))
            fds.append(os.open(self.project, L.DIR_FLAGS))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[:-1], fds[-1]

    def _compute(self) -> list[L.Change]:
        layer_fds, project_fd = self._open()
        try:
            return L.changes(layer_fds, project_fd)
        except PermissionError as exc:
            # An unprivileged caller cannot read what the command made unreadable to its
            # owner (chmod 000): the review fails closed rather than guess.
            raise WorkspaceError(f"the layer holds an entry this user cannot read ({exc}): discard() it, or "
                                 "review as root", Reason.WORKSPACE_LAYER_INVALID) from exc
        except OSError as exc:   # a name swapped between its lstat and its open (ELOOP, ENOTDIR)
            raise WorkspaceError(f"the layer changed during the review ({exc})",
                                 Reason.WORKSPACE_LAYER_INVALID) from exc
        finally:
            for fd in layer_fds + [project_fd]:
                os.close(fd)

    def changes(self) -> list[L.Change]:
        """The change set against the host project, one :class:`Change` per path, in
        pre-order; it is what :meth:`commit` will apply (or refuse).

        Raises:
            WorkspaceError: ``workspace_layer_invalid`` (the layer changed during the review).
        """
        self._reviewed = self._compute()
        return list(self._reviewed)

    def diff(self, paths=None) -> str:
        """A unified diff of the changed text files (all, or ``paths``); binary and large
        files are named, mode changes listed.

        Raises:
            WorkspaceError: as :meth:`changes`.
        """
        items = [c for c in self._compute() if paths is None or c.path in set(paths)]
        layer_fds, project_fd = self._open()
        try:
            return L.diff(items, layer_fds, project_fd)
        finally:
            for fd in layer_fds + [project_fd]:
                os.close(fd)

    # -- commit, discard ------------------------------------------------------------------------

    def commit(self, paths=None, *, max_file_size: int = 1 << 30, allow_git: bool = False) -> list[L.Change]:
        """Apply the reviewed changes (all, or those at or below ``paths``) to the host
        project and drop them from the layer; returns what was applied
        (workspace_commit.py says how, and how to finish an interrupted commit). Git
        metadata the command made (a nested ``.git``, a bare repository) is refused
        unless ``allow_git`` (workspace_git.py).

        Raises:
            WorkspaceConflict: a host entry changed since the workspace was opened.
            WorkspaceError: ``workspace_changed``, ``workspace_unsafe_entry``,
                ``workspace_file_too_large``, ``invalid_path``. Nothing was applied.
        """
        from .workspace_commit import commit
        done = commit(self, paths, max_file_size, allow_git)
        self._reviewed = None
        return done

    def discard(self) -> None:
        """Drop every change of the upper layer (snapshots taken stay).

        Raises:
            OSError: the layer cannot be removed.
        """
        for name in ("upper", "work"):
            rmtree(os.path.join(self.store, name))
            os.mkdir(os.path.join(self.store, name), 0o700)
        self._reviewed = None

    # -- snapshots, forks -----------------------------------------------------------------------

    def snapshot(self) -> "Snapshot":
        """Freeze the current state: the upper layer becomes a read-only lower layer (a
        rename: O(1) in the number of files) and the workspace goes on over it.

        Raises:
            OSError: the layer cannot be renamed.
        """
        frozen = os.path.join(self.store, "layers", str(self._snapshots))
        self._snapshots += 1
        os.rename(self.upper, frozen)
        os.chmod(frozen, 0o500)
        os.mkdir(self.upper, 0o700)
        rmtree(os.path.join(self.store, "work"))
        os.mkdir(os.path.join(self.store, "work"), 0o700)
        self._lowers += (frozen,)
        self._reviewed = None
        return Snapshot(self.project, self._lowers, self._hidden, self.opened_ns, self)

    def remove(self) -> None:
        """Delete the store (upper, work, this workspace's snapshots: forks of them need
        it kept; remove the first workspace last). Without it the store goes when the
        workspace and every fork of its snapshots are garbage, or at exit.

        Raises:
            OSError: never for what is already gone (best effort on what is left).
        """
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def __repr__(self):
        return f"Workspace({self.project!r}, store={self.store!r})"


class Snapshot:
    """A frozen state of a workspace (:meth:`Workspace.snapshot`); :meth:`fork` starts a
    new workspace from it."""

    def __init__(self, project, lowers, hidden, opened_ns, origin):
        self.project, self.layers, self._hidden, self.opened_ns = project, lowers, hidden, opened_ns
        self._origin = origin   # holds the store of the layers (and through it, its own base)

    def fork(self, *, store_dir=None) -> Workspace:
        """A new workspace over this snapshot, diverging independently of every other.

        Raises:
            PolicyError: as :class:`Workspace`.
        """
        return Workspace(self.project, store_dir=store_dir, _lowers=self.layers, _hidden=self._hidden,
                         _opened=self.opened_ns, _base=self)
