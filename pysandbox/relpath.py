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


def from_caller(path):
    """``path`` made absolute against the current directory when it is a relative str,
    bytes or PathLike; anything else (absolute, empty, NUL, not a path) unchanged, for
    the path check to judge and report."""
    try:
        text = os.fspath(path)
    except TypeError:
        return path
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not isinstance(text, str) or not text or "\x00" in text or text.startswith("/"):
        return text
    base = os.getcwd()
    parts = text.split("/")
    while parts and parts[0] in ("..", ".", ""):
        if parts.pop(0) == "..":
            base = os.path.dirname(base)
    return base.rstrip("/") + "/" + "/".join(parts) if parts else base
