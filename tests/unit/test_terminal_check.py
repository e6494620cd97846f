"""plan.check_terminal: a terminal of its own needs the devpts of the minimal /dev,
untouched after it (pysandbox/terminal.py opens the pty there)."""

from __future__ import annotations

import dataclasses

import pytest

from pysandbox import Policy
from pysandbox import plan as P
from pysandbox.errors import PolicyError, Reason
from pysandbox.fs import Bind, Dev, Dir, Tmpfs


def _plan(tmp_path, extra=(), drop_dev=False):
    policy = Policy.default(workdir=tmp_path)
    fs = tuple(op for op in policy.fs if not (drop_dev and isinstance(op, Dev))) + tuple(extra)
    return P.compile(dataclasses.replace(policy, fs=fs, allow_broad_writable=True))   # Bind("/dev", "/dev")


def test_the_default_policy_can_have_a_terminal(tmp_path):
    P.check_terminal(_plan(tmp_path))
    P.check_terminal(_plan(tmp_path, [Tmpfs("/mnt"), Dir("/dev/shm/x")]))


@pytest.mark.parametrize("extra", [[Tmpfs("/dev/pts")], [Tmpfs("/dev")], [Bind("/dev", "/dev")],
                                   [Bind("/dev/pts", "/dev/pts")], [Tmpfs("/")]])
def test_a_devpts_covered_afterwards_is_refused(tmp_path, extra):
    with pytest.raises(PolicyError) as info:
        P.check_terminal(_plan(tmp_path, extra))
    assert info.value.reason is Reason.TERMINAL_UNAVAILABLE


def test_no_minimal_dev_is_refused(tmp_path):
    with pytest.raises(PolicyError) as info:
        P.check_terminal(_plan(tmp_path, drop_dev=True))
    assert info.value.reason is Reason.TERMINAL_UNAVAILABLE
