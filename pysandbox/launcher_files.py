"""The launcher's own files stay read-only in every sandbox of the default policy.

pysandbox trusts the Python environment it runs from (THREAT_MODEL.md, "What is
trusted"). A project often holds that environment (``proj/.venv``), and the workdir is
writable: a command could then drop a ``.pth`` file into ``site-packages`` or rewrite
pysandbox itself, and the caller's next Python start would run it on the host,
unsandboxed. So ``Policy.default`` binds read-only onto itself each of
:func:`paths` (the interpreter's prefixes, and the directories pysandbox and
bwrap_compat are imported from) that lies strictly inside a writable path of the policy.

What the caller names wins: a launcher path that is itself the workdir or a named
``rw`` path (``--rw .venv`` to let a command ``pip install`` into the launcher's own
environment) stays writable. Not covered: other interpreters and tools the host runs
from the project later (see gitmeta.py's note).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from .fs import Bind


def paths() -> list[str]:
    """The launcher's own trees, canonical: ``sys.prefix``, ``sys.exec_prefix``,
    ``sys.base_prefix`` and the folders of the ``pysandbox`` and ``bwrap_compat`` packages."""
    here = os.path.dirname(os.path.abspath(__file__))
    roots = (sys.prefix, sys.exec_prefix, sys.base_prefix, here, os.path.join(os.path.dirname(here), "bwrap_compat"))
    return list(dict.fromkeys(os.path.realpath(p) for p in roots if os.path.isdir(p)))


def _under(path: str, top: str) -> bool:
    return path.startswith(top.rstrip("/") + "/")


def default_binds(items: Iterable[tuple], launcher: Iterable[str] | None = None) -> tuple:
    """``Policy.default``'s read-only binds of the launcher's trees (``launcher``: default
    :func:`paths`) inside its writable binds; ``items`` are its ``(path, rank, op)``
    entries (rank 0 a bind). A tree is bound when the innermost path the policy names
    around it is writable and is not itself one of the trees or inside one (``--rw .venv``
    leaves the environment to the command), and no named path lies inside it; a tree
    inside another bound one is not bound twice."""
    items = list(items)
    trees = list(paths() if launcher is None else launcher)
    writable = {path for path, rank, op in items if rank == 0 and isinstance(op, Bind) and not op.readonly}
    named = {path for path, _, _ in items}

    def guarded(tree: str) -> bool:
        around = [n for n in named if n == tree or _under(tree, n)]
        if not around or any(_under(n, tree) for n in named):
            return False
        inner = max(around, key=len)
        return inner in writable and not any(inner == t or _under(inner, t) for t in trees)

    keep = sorted(t for t in trees if guarded(t))
    out = [t for t in keep if not any(_under(t, q) for q in keep)]
    return tuple(Bind(t, t, readonly=True) for t in out)
