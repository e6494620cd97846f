"""pysandbox/launcher_files.py: which of the launcher's trees Policy.default binds read-only."""

from __future__ import annotations

import sys

from pysandbox import Bind
from pysandbox.launcher_files import default_binds, paths


def _items(*writable, ro=()):
    """default_binds' arguments for a policy naming ``writable`` and ``ro`` binds."""
    return list(writable), list(writable) + list(ro)


def test_only_trees_strictly_inside_a_writable_path_and_not_named():
    launcher = ["/p/.venv", "/p/.venv/lib/site", "/p/src/pysandbox", "/usr/lib/python3", "/q/env"]
    got = default_binds(*_items("/p", ro=["/q"]), launcher)
    assert got == (Bind("/p/.venv", "/p/.venv", readonly=True), Bind("/p/src/pysandbox", "/p/src/pysandbox",
                                                                           readonly=True))
    # a named tree, or one with a named path inside, is the caller's
    assert default_binds(*_items("/p", "/p/.venv"), launcher) == (Bind("/p/src/pysandbox", "/p/src/pysandbox",
                                                                      readonly=True),)
    assert default_binds(*_items("/p", ro=["/p/.venv/share"]), ["/p/.venv"]) == ()
    # the workdir that is the environment itself is named: left writable
    assert default_binds(*_items("/p/.venv"), ["/p/.venv"]) == ()


def test_paths_holds_the_interpreters_prefix():
    import os
    assert os.path.realpath(sys.prefix) in paths()
