"""The view of the sandbox from the host: what a sandbox path will be, after a prefix
of filesystem operations, without launching anything.

One walk serves every caller that needs to know in advance what the sandbox shows:
the plan compiler (does a mount point exist inside a host bind?), the command lookup
(which file will ``execve`` run?), pybwrap (does the caller's directory exist in the
sandbox? which parents would bwrap create?). It reads either the plan's operations
(:mod:`pysandbox.ops`) or a Policy's filesystem operations (:mod:`pysandbox.policy`):
both spell a mount's target ``dest``, a bind's host path ``src`` and an overlay's
layers ``upper``/``lower``. Host facts are ``lexists``/``stat`` only.
"""

from __future__ import annotations

import bisect
import errno
import os
import stat

from . import ops as O
from . import fs as P
from .execpath import exec_candidates
from .fs_ops import with_records

# What puts a new filesystem on a path (the rest only add nodes inside one); each with
# the Policy records that become it (pysandbox/fs_ops.py, the one table).
_MOUNTS = with_records(O.BindMount, O.MountTmpfs, O.MountOverlay, O.MountProc, O.MinimalDev, O.MountMqueue)
_BINDS = with_records(O.BindMount)
_OVERLAYS = with_records(O.MountOverlay)
_EMPTY = with_records(O.MountTmpfs, O.MinimalDev, O.MountMqueue)
_LEAVES = with_records(O.WriteFile, O.MakeSymlink)
_FILES = with_records(O.WriteFile)


def is_mount(op) -> bool:
    """Whether ``op`` mounts something on its destination (a file bind included; a
    Policy's optional bind whose source is missing is skipped, as the plan skips it)."""
    if isinstance(op, P.Bind) and op.optional and op.src is not None and not os.path.lexists(op.src):
        return False
    return isinstance(op, _MOUNTS) or (isinstance(op, _FILES) and op.bind)


def under(path: str, dest: str) -> bool:
    """Whether ``path`` is ``dest`` or inside it."""
    return dest == "/" or path == dest or path.startswith(dest + "/")


def _prefixes(path: str):
    """Every ``dest`` with ``under(path, dest)`` other than "/": ``path`` itself and each
    prefix of it that ends just before a "/" (so "/a//b" yields "/a/" too, as ``under``)."""
    yield path
    k = path.rfind("/")
    while k > 0:
        yield path[:k]
        k = path.rfind("/", 0, k)


class View(list):
    """The ops applied so far, as a list, with an index of their destinations: what
    :func:`cover`, :func:`exists` and :func:`host_path` ask costs the depth of the path,
    not the number of ops (a policy of thousands of binds stays linear). Only appends
    keep the index: any other change of the list is refused."""

    def __init__(self, ops=()):
        super().__init__()
        self._mounts: dict = {}      # dest -> indices of the mounts on it, ascending
        self._at: dict = {}          # dest -> indices of every op on it, ascending
        self._below: dict = {}       # dest.rstrip("/") of an ancestor -> indices of ops strictly below it
        self.extend(ops)

    def append(self, op) -> None:
        i = len(self)
        super().append(op)
        dest = getattr(op, "dest", None)
        if dest is None:
            return
        self._at.setdefault(dest, []).append(i)
        if is_mount(op):
            self._mounts.setdefault(dest, []).append(i)
        k = dest.find("/")
        while k >= 0:
            self._below.setdefault(dest[:k], []).append(i)
            k = dest.find("/", k + 1)

    def extend(self, ops) -> None:
        for op in ops:
            self.append(op)

    def __iadd__(self, ops):
        self.extend(ops)
        return self

    def _refuse(self, *args, **kwargs):
        raise TypeError("a View only grows by append/extend (its index would go stale)")

    insert = pop = remove = clear = sort = reverse = __setitem__ = __delitem__ = __imul__ = _refuse

    def cover(self, path: str, limit: int | None = None) -> int:
        """:func:`cover` among the first ``limit`` ops (all by default)."""
        limit = len(self) if limit is None else limit
        best = -1
        for dest in _prefixes(path):
            best = max(best, _last_before(self._mounts.get(dest), limit))
        return max(best, _last_before(self._mounts.get("/"), limit))

    def made_at_or_below(self, path: str, start: int = 0, limit: int | None = None) -> int:
        """The index of the first op in ``start:limit`` that makes ``path`` or something
        inside it; -1: none."""
        limit = len(self) if limit is None else limit
        first = [_first_from(self._at.get(path), start), _first_from(self._below.get(path.rstrip("/")), start)]
        found = [i for i in first if 0 <= i < limit]
        return min(found) if found else -1


def _last_before(indices, limit: int) -> int:
    if not indices:
        return -1
    k = bisect.bisect_left(indices, limit)
    return indices[k - 1] if k else -1


def _first_from(indices, start: int) -> int:
    if not indices:
        return -1
    k = bisect.bisect_left(indices, start)
    return indices[k] if k < len(indices) else -1


def _view(done) -> View:
    return done if isinstance(done, View) else View(done)


def cover(path: str, done) -> int:
    """The index in ``done`` of the innermost mount covering ``path``; -1: the setup's
    empty root."""
    return _view(done).cover(path)


def _layers(op, rest: str):
    """The host paths an overlay shows at ``rest``, topmost layer first."""
    layers = ((op.upper,) if op.upper is not None else ()) + tuple(reversed(op.lower))
    return [(layer.rstrip("/") + rest) or "/" for layer in layers]


def host_path(sandbox_path: str, done, limit: int | None = None) -> tuple[str | None, object | None]:
    """Where ``sandbox_path`` lives, given the mount ops applied so far (the first
    ``limit`` of ``done``, all by default).

    Returns ``(host_path, op)``: the host path behind it when the innermost covering
    mount is a host bind or an overlay layer that has it (else None), and that covering
    op (None: the setup tmpfs root).
    """
    done = _view(done)
    i = done.cover(sandbox_path, limit)
    if i < 0:
        return None, None
    op = done[i]
    rest = sandbox_path[len(op.dest):] if op.dest != "/" else sandbox_path
    if isinstance(op, _BINDS) and op.src is not None:
        src = op.src.rstrip("/") or ""
        return (src + rest) if (src + rest) else "/", op
    if isinstance(op, _OVERLAYS):
        for cand in _layers(op, rest):
            if os.path.lexists(cand):
                return cand, op
    return None, op


def _made_at_or_below(path: str, done) -> object | None:
    """The first op of ``done`` that makes ``path`` or something inside it."""
    done = _view(done)
    i = done.made_at_or_below(path)
    return done[i] if i >= 0 else None


def exists(path: str, done) -> bool:
    """Whether ``path`` exists in the sandbox after the ops ``done``."""
    done = _view(done)
    i = done.cover(path)
    if done.made_at_or_below(path, i + 1) >= 0:
        return True
    if i < 0:
        return path == "/"
    host, op = host_path(path, done)
    if host is not None:
        return os.path.lexists(host)
    return path == op.dest


def is_dir(path: str, done) -> bool:
    """Whether ``path`` will be a directory in the sandbox (bwrap's chdir(old_cwd) test)."""
    done = _view(done)
    host, op = host_path(path, done)
    if host is not None:
        return os.path.isdir(host)
    if op is None:
        return False
    made = _made_at_or_below(path, done)
    if made is not None:
        return not isinstance(made, _LEAVES) or made.dest != path
    return path == op.dest



def sandbox_cwd(cwd, base: str) -> str:
    """``cwd`` (str, bytes or PathLike; relative: to ``base``, the policy's start directory)
    as the absolute, normalised sandbox path a command starts in. The rule of a session's
    per-command ``cwd`` and of a one-shot launch's.

    Raises:
        PolicyError (invalid_path): empty, or NUL in it.
    """
    from .errors import PolicyError, Reason
    try:
        text = os.fsdecode(cwd)
    except TypeError:
        raise PolicyError(f"cwd must be a path, not {type(cwd).__name__}", Reason.INVALID_PATH, cwd) from None
    if not text or "\x00" in text:
        raise PolicyError(f"cwd is empty or contains NUL: {text!r}", Reason.INVALID_PATH, text)
    return os.path.normpath(os.path.join(base, text))


def check_start_directory(path: str, done, what: str = "cwd", field: str | None = None) -> None:
    """Refuse ``path`` as a start directory when the sandbox's view, after the mount ops
    ``done``, shows no directory there (missing, not a directory, or hidden), as far as
    the host can tell before a launch. A procfs is judged by the host's; a pid directory,
    what the setup makes (or a parent of it) and the nodes of a minimal /dev (shm, pts,
    the fd links) are left to the launch's own chdir. ``field`` goes on the error (the
    CLI names the option from it).

    Raises:
        StartDirectoryMissing (a PolicyError, ``invalid_path``, and a FileNotFoundError):
            missing or not a directory;
            (conflicting_options): a hide covers it.
    """
    from .errors import PolicyError, Reason
    if path == "/":
        return   # the new root: always there
    done = _view(done)
    host, op = host_path(path, done)
    if isinstance(op, O.MountTmpfs) and op.readonly and op.mode == O.HIDE_MODE:
        raise PolicyError(f"{what} {path}: hidden in the sandbox view (a hide covers {op.dest})",
                          Reason.CONFLICTING_OPTIONS, path, field=field)
    if isinstance(op, O.MountProc) and path != op.dest:
        rest = path[len(op.dest):].lstrip("/")
        if rest.split("/")[0].isdigit() or os.path.isdir("/proc/" + rest):
            return   # a pid of the sandbox's own, or there as far as the host's procfs tells
        problem = f"no such directory in the sandbox's own procfs on {op.dest} (as the host's /proc tells)"
    elif host is not None:
        if os.path.isdir(host):
            return
        problem = ("not a directory" if os.path.lexists(host) else "no such directory") + " in the sandbox view"
    elif path == getattr(op, "dest", None) or _made_at_or_below(path, done) is not None:
        return   # made by the setup (or a parent of what it makes): what it is, the launch tells
    elif isinstance(op, O.MinimalDev):
        if path[len(op.dest):].strip("/").split("/")[0] in _DEV_DIRS:
            return
        problem = f"no such directory in the sandbox's minimal /dev on {op.dest}"
    elif op is None or isinstance(op, (O.MountTmpfs, O.MountMqueue, O.MountOverlay)):
        problem = "no such directory in the sandbox view"
    else:
        return
    from .errors import StartDirectoryMissing   # a session's chdir raises the same (session_proto.failure)
    raise StartDirectoryMissing(f"{what} {path}: {problem}", path,
                                errno.ENOTDIR if problem.startswith("not a dir") else errno.ENOENT, field=field)


# What a minimal /dev holds that a start directory may be (or lead through): the
# backends make them (native_ops.DEV_LINKS, shm, pts).
_DEV_DIRS = ("shm", "pts", "fd", "stdin", "stdout", "stderr")


def find_executable(name: str, done, env: dict, cwd: str) -> str:
    """Find ``name`` as the sandbox's ``execve`` will (the PATH rule of
    :func:`pysandbox.execpath.exec_candidates`), through the ops ``done``.

    Returns the sandbox path. Raises FileNotFoundError or PermissionError as exec
    would; a path not backed by the host (tmpfs, created by the plan) is assumed
    executable and left to the backend's exec to judge.
    """
    denied = None
    done = _view(done)
    for cand in exec_candidates(name, env.get("PATH"), cwd):
        host, op = host_path(cand, done)
        if host is None:
            if op is not None and (op.dest == cand or not isinstance(op, _EMPTY)
                                   or any(getattr(o, "dest", None) == cand for o in done)):
                return cand   # not host-backed: the backend's exec decides
            continue   # an empty tmpfs/dev holds nothing the plan did not put there
        try:
            st = os.stat(host)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return cand
        denied = cand
    if denied is not None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
