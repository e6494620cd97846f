"""Git metadata in the writable paths: read-only by default.

A command may write the project; that is the work, and the caller reviews it (``git
diff``, a Workspace's change set). But ``.git`` is not reviewed: a change there never
shows in ``git diff``, and the host's own ``git`` obeys it the next time the person or
the agent runs git *outside* the sandbox. One line of ``.git/config``
(``core.fsmonitor``, ``core.hooksPath``, ``core.sshCommand``, a ``filter`` driver) or
one file in ``.git/hooks`` is a command run on the host, unsandboxed. Guarding single
files is not enough: a command that can write ``.git`` can create ``.git/commondir``
(git then reads its config from a directory the command chose) or rename ``.git`` away
and make a new one. So ``Policy.default`` binds each writable path's own ``.git``
(a directory, or a linked worktree's ``.git`` file) read-only onto itself when the policy
is built (a Workspace's overlay is a writable path: its writes reach the host at commit): inside, git reads the repository but cannot commit, fetch or change its
configuration ("Read-only file system"); the bind is a mount point, so it can be neither
renamed nor removed. As Codex does for its writable roots.

What the caller names wins: a ``.git`` that is itself the workdir or a named ``rw`` path
stays writable, and ``protect_git=False`` (``--writable-git``, profile key
``protect_git = false``) turns the rule off. Not covered: a ``.git`` below the top of a
writable path (a vendored repository, a submodule's ``.git`` file: the host's git there
obeys it), a ``.git`` that is a symlink (a bind cannot cover the link itself; the
command could replace it), one created after the policy was built (a workdir inside a
repository without a ``.git`` of its own can get one), and everything else the host runs
from the project later (``Makefile``, ``.venv``, ``node_modules/.bin``, editor settings):
review the change before running it, or use a Workspace (whose commit refuses git
metadata the command made anywhere: pysandbox/workspace_git.py).
"""

from __future__ import annotations

import os
import stat
from _collections_abc import Iterable   # collections.abc: the same classes, after importing collections (issue 28)

from .errors import PolicyError, Reason
from .fs import Bind

OPT_OUT = "--writable-git, Policy.default(protect_git=False) or protect_git = false in a profile"


def protected(writable: Iterable[str], named: Iterable[str] = ()) -> list[str]:
    """The ``.git`` entries (canonical host paths) to bind read-only: the one at the top
    of each ``writable`` path that is a directory or a regular file now (not a symlink),
    unless it is one of the ``named`` paths or lies inside one of the other named
    writable paths' own ``.git``."""
    named = {os.path.normpath(p) for p in named}
    out = []
    for top in dict.fromkeys(os.path.normpath(p) for p in writable):
        path = os.path.join(top, ".git")
        if path in named:
            continue
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            out.append(path)
    return out


def default_binds(writable: Iterable[str], named: Iterable[str], protect_git=True) -> tuple:
    """``Policy.default``'s read-only ``.git`` binds, to go after its binds: ``writable``
    its writable binds, ``named`` every path it names. Empty when ``protect_git`` is False.

    Raises:
        PolicyError: ``protect_git`` not a bool (``invalid_value``).
    """
    if not isinstance(protect_git, bool):
        raise PolicyError("protect_git must be a bool", Reason.INVALID_VALUE, protect_git, field="protect_git")
    if not protect_git:
        return ()
    return tuple(Bind(path, path, readonly=True) for path in protected(writable, named))


def coverage(policy) -> dict:
    """What the policy does about git metadata, for ``status``: ``protected`` (the
    read-only ``.git`` binds inside writable paths) and the ``opt_out``."""
    writable = policy.writable_paths
    binds = [op.dest for op in policy.fs if isinstance(op, Bind) and op.readonly
             and os.path.basename(op.dest) == ".git"
             and any(os.path.dirname(op.dest) == w for w in writable)]
    return {"protected": binds, "opt_out": OPT_OUT}
