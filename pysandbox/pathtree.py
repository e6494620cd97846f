"""How two absolute, normalised paths relate as places in one tree: the one rule every
module that compares a path with a policy's paths uses (a string prefix is not enough:
``/a/bc`` is not inside ``/a/b``)."""

from __future__ import annotations


def below(path: str, top: str) -> bool:
    """Whether ``path`` lies strictly inside ``top`` (never ``top`` itself)."""
    return path.startswith(top.rstrip("/") + "/")


def within(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or lies inside it; ``/`` holds every path."""
    return top == "/" or path == top or below(path, top)
