"""``pysandbox.__all__`` is exactly the public API (httpx's test_exported_members)."""

from __future__ import annotations

import types

import pysandbox


def test_all_public_members_are_exported():
    for name in pysandbox.__all__:   # resolve the lazily loaded ones (status)
        getattr(pysandbox, name)
    public = {name for name, value in vars(pysandbox).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert set(pysandbox.__all__) - {"__version__"} == public
    assert len(pysandbox.__all__) == len(set(pysandbox.__all__))


def test_exported_members_resolve_and_come_from_pysandbox_or_subprocess():
    for name in pysandbox.__all__:
        value = getattr(pysandbox, name)
        module = getattr(value, "__module__", None)
        if module is not None and isinstance(value, (type, types.FunctionType)):
            assert module.split(".")[0] in ("pysandbox", "subprocess"), (name, module)


def test_design_api_names():
    for name in ("Policy", "run", "Popen", "call", "check_call", "check_output", "status", "SandboxError", "PolicyError", "Reason",
                 "CompletedProcess", "CalledProcessError", "TimeoutExpired", "PIPE", "DEVNULL"):
        assert name in pysandbox.__all__
    assert callable(pysandbox.status)
