"""TEMPORARY, test-only: a stand-in for pysandbox.session.Sandbox until it lands on main.

One-shot pysandbox.run per command, with the policy's private /tmp replaced by a host
temporary directory so files persist between commands. Deleted once the real session
is merged.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile

import pysandbox
from pysandbox.policy import Bind, Policy, Tmpfs

_ids = itertools.count()


class StandInSandbox:
    def __init__(self, policy=None, backend="auto"):
        self._tmp = tempfile.mkdtemp(prefix="psb-standin-")
        policy = policy if policy is not None else Policy.default()
        fs = tuple(Bind(self._tmp, "/tmp") if isinstance(op, Tmpfs) and op.dest == "/tmp" else op
                   for op in policy.fs)
        self.policy = policy.replace(fs=fs)
        import os
        for op in fs:   # mount points below /tmp, made in the host directory now bound there
            if isinstance(op, Bind) and op.dest.startswith("/tmp/"):
                os.makedirs(self._tmp + op.dest[4:], exist_ok=True)
        self._backend = backend
        self.id = f"standin-{next(_ids)}"
        self.closed = False

    def run(self, argv, **kwargs):
        if self.closed:
            raise RuntimeError("closed")
        kwargs.pop("cwd", None)
        return pysandbox.run(argv, policy=self.policy, backend=self._backend, **kwargs)

    def close(self):
        self.closed = True
        shutil.rmtree(self._tmp, ignore_errors=True)


def install() -> None:
    """Make ``pysandbox.session`` importable (the stand-in) where the real one is missing."""
    import importlib.util
    import sys
    import types

    if "pysandbox.session" in sys.modules or importlib.util.find_spec("pysandbox.session") is not None:
        return
    mod = types.ModuleType("pysandbox.session")
    mod.Sandbox = StandInSandbox
    sys.modules["pysandbox.session"] = mod
    pysandbox.session = mod
