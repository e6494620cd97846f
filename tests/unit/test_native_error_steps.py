"""Every failure the native child can report for an op names a real plan step (issue 26
item 2's symptom: an rlimit refused read as "plan step None, native op 57"): over the
fixed policy corpus (tests/support/policy_corpus.py: every filesystem operation and
policy option), each op of the translated array, made to fail with EPERM, gives an error
whose text has no "None" and whose ``plan step N`` is an index of the plan's ops (a tail
step names its plan step, or the plan's rlimits entry). No kernel: the error mapping only.
Live control: the same reading of a MountProc failure finds the plan's MountProc."""

from __future__ import annotations

import errno
import re

import pytest

from pysandbox import plan as P
from pysandbox.backends import native as N
from pysandbox.backends.native.native_errors import setup_error
from tests.support.policy_corpus import CASES
from tests.support.world import World

STEP = re.compile(r"plan step (\d+)[,)]")


@pytest.fixture(scope="module")
def world():
    w = World.create()
    fds = w.open_fds()
    yield w
    w.close_fds(fds)
    w.remove()


def _failures(plan):
    ops = N.translate(plan)
    packed = N.pack(plan, ops)
    return [(op, setup_error(packed, N.STAGE_OP, i, errno.EPERM, "x", plan.namespaces)) for i, op in enumerate(ops)]


@pytest.mark.parametrize("name,build", CASES, ids=[c[0] for c in CASES])
def test_every_op_failure_names_its_plan_step(world, name, build):
    plan = P.compile(build(world))
    for op, exc in _failures(plan):
        text = str(exc)
        assert "None" not in text, (op.kind, op.stage, text)
        found = STEP.search(text)
        if op.kind == "RLIMIT":
            assert "plan rlimits RLIMIT_" in text, text
        elif found is not None:
            assert int(found.group(1)) == op.plan_index < len(plan.ops), (op.kind, op.plan_index, text)


def test_control_a_proc_mount_failure_names_the_plans_proc(world):
    plan = P.compile(CASES[0][1](world))
    proc = [(op, exc) for op, exc in _failures(plan) if op.kind == "MOUNT" and op.c == "proc"]
    assert proc, "the corpus's first case mounts a procfs"
    step = int(STEP.search(str(proc[0][1])).group(1))
    assert isinstance(plan.ops[step], P.MountProc) and proc[0][1].op == step


def test_an_rlimit_failure_names_the_plans_rlimits_entry():
    """The rlimit of the issue: its op has no plan op (rlimits are launch facts), so it
    names the plan's rlimits entry, as the bwrap init's record does (tests/unit/test_tail.py)."""
    import pysandbox
    from pysandbox.limits import Limits
    plan = P.compile(pysandbox.Policy.default(workdir=None, limits=Limits(open_files=64)))
    rlimits = [exc for op, exc in _failures(plan) if op.kind == "RLIMIT"]
    assert rlimits and all("None" not in str(exc) for exc in rlimits), rlimits
    assert any("plan rlimits RLIMIT_NOFILE=64:64, tail step RLIMIT" in str(exc) for exc in rlimits), rlimits
