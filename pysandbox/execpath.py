"""Where a command is looked for: the exec candidates of a name, computed once in the
caller (as CPython's _posixsubprocess does) so the sandboxed child only tries them in
order. Pure: no file system access. ``DEFAULT_PATH`` is the PATH used when the
command's environment has none (see docs/ARCHITECTURE.md)."""

from __future__ import annotations

import os

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def exec_candidates(name: str, path_env: str | None, cwd: str) -> list[str]:
    """The absolute paths to execve, in order, for ``name`` in a process whose working
    directory is ``cwd`` (absolute) and whose PATH is ``path_env`` (None: DEFAULT_PATH).

    A name containing "/" is not searched: [that path joined to cwd]. Otherwise one
    candidate per PATH entry, an empty entry meaning the working directory (as execvp).
    """
    if "/" in name:
        return [name if name[0] == "/" else os.path.join(cwd, name)]   # an absolute name: join's result
    path = DEFAULT_PATH if path_env is None else path_env
    return [os.path.join(cwd, entry, name) for entry in path.split(":")]
