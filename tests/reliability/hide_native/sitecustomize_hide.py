"""An import hook that makes ``import pysandbox._native`` fail (simulates a missing build)."""

import importlib.abc
import sys

HIDDEN = "pysandbox._native"


class _HideNative(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == HIDDEN:
            raise ImportError(f"No module named {HIDDEN!r} (hidden by tests/support/constrained.py)", name=name)
        return None


if not any(isinstance(f, _HideNative) for f in sys.meta_path):
    sys.meta_path.insert(0, _HideNative())
    sys.modules.pop(HIDDEN, None)
