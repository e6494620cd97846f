"""The launcher's own files stay read-only in every sandbox of the default policy.

pysandbox trusts the Python environment it runs from (THREAT_MODEL.md, "What is
trusted"). A project often holds that environment (``proj/.venv``), and the workdir is
writable: a command could then drop a ``.pth`` file into ``site-packages`` or rewrite
pysandbox itself, and the caller's next Python start would run it on the host,
unsandboxed. So ``Policy.default`` binds read-only onto itself each of
:func:`paths` (the interpreter's prefixes, and the directories pysandbox and
bwrap_compat are imported from) that lies strictly inside a writable path of the policy (a Workspace's overlay is one: its
writes reach the host at commit).

What the caller names wins: a launcher path that is itself the workdir or a named
``rw`` path (``--rw .venv`` to let a command ``pip install`` into the launcher's own
environment) stays writable. Not covered: other interpreters and tools the host runs
from the project later (see gitmeta.py's note).
"""

from __future__ import annotations

import os
import sys
from _collections_abc import Iterable   # collections.abc: the same classes, after importing collections (issue 28)

from .fs import Bind
from .pathtree import below as _under


def paths() -> list[str]:
    """The launcher's own trees, canonical: ``sys.prefix``, ``sys.exec_prefix``,
    ``sys.base_prefix`` and the folders of the ``pysandbox`` and ``bwrap_compat`` packages."""
    return list(_trees())


def _trees() -> tuple[str, ...]:
    # Resolved once a process: none of them moves while it runs, and Policy.default (every
    # run without a policy) asks. A plain cache, not functools.cache: functools imports
    # collections, which a launch does not otherwise need (issue 28).
    if _TREES:
        return _TREES[0]
    here = os.path.dirname(os.path.abspath(__file__))
    roots = (sys.prefix, sys.exec_prefix, sys.base_prefix, here, os.path.join(os.path.dirname(here), "bwrap_compat"))
    _TREES.append(tuple(dict.fromkeys(os.path.realpath(p) for p in roots if os.path.isdir(p))))
    return _TREES[0]


_TREES: list[tuple[str, ...]] = []   # _trees()'s answer, once computed


def default_binds(writable: Iterable[str], named: Iterable[str], launcher: Iterable[str] | None = None) -> tuple:
    """``Policy.default``'s read-only binds of the launcher's trees (``launcher``: default
    :func:`paths`) inside its ``writable`` binds, ``named`` every path it names. A tree
    is bound when the innermost path the policy names around it is writable and is not
    itself one of the trees or inside one (``--rw .venv`` leaves the environment to the
    command), and no named path lies inside it; a tree inside another bound one is not
    bound twice."""
    trees = list(paths() if launcher is None else launcher)
    writable, named = set(writable), set(named)

    def guarded(tree: str) -> bool:
        around = [n for n in named if n == tree or _under(tree, n)]
        if not around or any(_under(n, tree) for n in named):
            return False
        inner = max(around, key=len)
        return inner in writable and not any(inner == t or _under(inner, t) for t in trees)

    keep = sorted(t for t in trees if guarded(t))
    out = [t for t in keep if not any(_under(t, q) for q in keep)]
    return tuple(Bind(t, t, readonly=True) for t in out)
