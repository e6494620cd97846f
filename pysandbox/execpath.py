"""The one PATH rule: which files ``execve`` is tried on for a command name.

Computed once in Python, as CPython's ``_posixsubprocess`` does, and shared by every
backend: the native child only tries the candidates in order; the bwrap backend and
pybwrap look the command up through :func:`pysandbox.view.find_executable`, which
walks the same list.
"""

from __future__ import annotations

import os

# execvp's default when the environment has no PATH (glibc's confstr(_CS_PATH) plus sbin).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def exec_candidates(name: str, path_env: str | None, cwd: str) -> list[str]:
    """The paths ``execve`` is tried on, in order, for ``name`` run in directory ``cwd``
    of the sandbox: ``name`` itself if it holds a ``/``, else each ``PATH`` entry
    (``DEFAULT_PATH`` when unset; an empty entry means the working directory, as
    execvp) joined with it. Relative paths are made absolute against ``cwd``."""
    if "/" in name:
        return [os.path.join(cwd, name)]
    search = DEFAULT_PATH if path_env is None else path_env
    return [os.path.join(cwd, d or ".", name) for d in search.split(":")]
