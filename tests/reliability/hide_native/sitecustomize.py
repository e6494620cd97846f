"""Loaded by every Python child of a ``native_missing`` simulated host (via PYTHONPATH)."""

import os

if os.environ.get("PYSANDBOX_TEST_HIDE_NATIVE") == "1":
    import sitecustomize_hide  # noqa: F401
