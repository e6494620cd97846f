"""Git metadata in a workspace's change set: refused at commit unless asked for
(:meth:`pysandbox.Workspace.commit` ``allow_git=True``, ``--allow-git``).

The project's own ``.git`` is bound read-only inside (pysandbox/gitmeta.py). But the
command may create git metadata elsewhere in the project, and a commit would put it on
the host, where the host's ``git`` obeys it the next time anyone (a shell prompt, an
editor, the agent) runs git in that directory: one line of ``config``
(``core.fsmonitor``, ``core.hooksPath``) or one file in ``hooks`` is a command run on
the host, unsandboxed, and a change set that adds ``sub/.git/config`` is easy to miss in
a review. So a commit refuses (``workspace_unsafe_entry``, the paths named):

- every change at or below a path component named ``.git`` (a nested repository, a
  ``.git`` file pointing elsewhere, a ``.git`` made at the top of a project that had
  none but lies inside a repository);
- every change inside a directory that would look like a bare repository after the
  commit: one holding ``HEAD`` and either both ``objects`` and ``refs`` or a
  ``commondir`` (git's own test for a git directory; git discovers a bare repository
  from inside it unless ``safe.bareRepository=explicit``).

The other changes commit with ``paths=``. Not covered: what else the host runs from the
project (a ``Makefile``, ``.envrc``, editor settings): review them.
"""

from __future__ import annotations

import os

from . import workspace_layer as L

def _looks_like_git_dir(names: set[str]) -> bool:
    return "HEAD" in names and ({"objects", "refs"} <= names or "commondir" in names)


def _host_names(project_fd: int, parts: tuple[str, ...]) -> set[str]:
    fd = L.open_dir(project_fd, parts)
    if fd is None:
        return set()
    try:
        return set(os.listdir(fd))
    finally:
        os.close(fd)


def git_metadata(chosen, reviewed, project_fd: int) -> list[str]:
    """The paths of ``chosen`` (changes about to be committed) that are git metadata by the
    module's rule; ``reviewed`` is the whole change set (what the directories will hold
    after the commit is the host's names, plus what the layer adds, minus what it deletes)."""
    added: dict[tuple[str, ...], set[str]] = {}
    deleted: dict[tuple[str, ...], set[str]] = {}
    for c in reviewed:
        into = deleted if c.kind == "deleted" else added
        into.setdefault(c.parts[:-1], set()).add(c.parts[-1])
    verdict: dict[tuple[str, ...], bool] = {}

    def is_git_dir(parts: tuple[str, ...]) -> bool:
        if parts not in verdict:
            names = (_host_names(project_fd, parts) | added.get(parts, set())) - deleted.get(parts, set())
            verdict[parts] = _looks_like_git_dir(names)
        return verdict[parts]

    found = []
    for c in chosen:
        parts = c.parts
        if ".git" in parts or any(is_git_dir(parts[:i]) for i in range(len(parts))):
            found.append(c.path)
    return found
