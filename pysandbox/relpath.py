"""Relative host paths, as ``subprocess`` takes them: resolved against the caller's
current directory before anything judges them.

``os.getcwd()`` is the kernel's physical path, so the leading ``..`` components of a
relative path climb real parents and are applied here; a ``..`` after a named component
is left in place for :func:`pysandbox.checks.check_path` to refuse, because ``a/..`` is
not the directory itself when ``a`` is a symlink (the lexical ``os.path.abspath`` would
name a path the kernel does not). The result is an ordinary absolute path: every check
an absolute path gets (symlinks in writable paths, too-broad writable paths, hides;
docs/ARCHITECTURE.md, invariants 10 and 15) runs on it unchanged.
"""

from __future__ import annotations

import os

from .checks import check_path
from .errors import PolicyError, Reason


def from_caller(path, lexical: bool = False):
    """``path`` made absolute against the current directory when it is a relative str,
    bytes or PathLike; anything else (absolute, empty, NUL, not a path) unchanged, for
    the path check to judge and report. ``lexical``: ``os.path.abspath``'s rule (the
    workdir's, as it always was: it is canonicalised and judged after)."""
    try:
        text = os.fspath(path)
    except TypeError:
        return path
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not isinstance(text, str) or not text or "\x00" in text or text.startswith("/"):
        return text
    if lexical:
        return os.path.abspath(text)
    base = os.getcwd()
    parts = text.split("/")
    while parts and parts[0] in ("..", ".", ""):
        if parts.pop(0) == "..":
            base = os.path.dirname(base)
    return base.rstrip("/") + "/" + "/".join(parts) if parts else base


def in_sandbox(path, base: str):
    """A relative ``chdir``: the sandbox path relative to ``base`` (the workdir, else
    ``/``), the rule of ``cwd=`` (:func:`pysandbox.view.sandbox_cwd`)."""
    from .view import sandbox_cwd
    try:
        text = os.fsdecode(path)
    except TypeError:
        return path   # the Policy's check reports the type
    return text if not text or text.startswith("/") or "\x00" in text else sandbox_cwd(text, base)


def paths(values, what) -> list[str]:
    """``ro``/``rw``/``hide``/``tmpfs`` of ``Policy.default``: one path or a list, each
    made absolute (:func:`from_caller`) and checked.

    Raises:
        PolicyError (invalid_path): not a path or a list of paths; a bad path.
    """
    if values is None:
        return []
    if isinstance(values, (str, bytes, os.PathLike)):
        values = [values]
    try:
        values = list(values)
    except TypeError:
        raise PolicyError(f"{what} must be a path or a list of paths: {values!r}",
                          Reason.INVALID_PATH, values, field=what) from None
    return [check_path(from_caller(v), f"{what} path", field=what) for v in values]
