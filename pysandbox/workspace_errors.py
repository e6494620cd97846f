"""The errors of workspaces (workspace.py, workspace_commit.py), in the one tree of
errors.py: each carries a stable :class:`Reason` and the paths it is about."""

from __future__ import annotations

from .errors import Reason, SandboxError


class WorkspaceError(SandboxError, RuntimeError):
    """A workspace refused a review or a commit; ``paths`` names the project-relative
    paths concerned (``str``, non-UTF-8 bytes as surrogate escapes). Nothing was applied.

    Reasons: ``workspace_changed`` (the layer is not what :meth:`Workspace.changes`
    reviewed), ``workspace_unsafe_entry`` (a setuid/setgid file, a device node or a
    socket), ``workspace_file_too_large`` (over ``max_file_size``),
    ``workspace_layer_invalid`` (the layer holds what overlayfs never makes, or changed
    under the review), ``invalid_path`` (a path to commit that is not a change)."""

    default_reason = Reason.WORKSPACE_LAYER_INVALID

    def __init__(self, message: str, reason: Reason | None = None, paths=()):
        super().__init__(message, reason)
        self.paths = tuple(paths)


class WorkspaceConflict(WorkspaceError):
    """A host file the commit would replace changed since the workspace was opened (or
    since the review): ``paths`` lists them; nothing was applied."""

    default_reason = Reason.WORKSPACE_CONFLICT
