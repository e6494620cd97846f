"""The one table between a Policy's filesystem records (pysandbox/fs.py) and the plan's
operations (pysandbox/ops.py): pysandbox/fs_ops.py. Every record but ``Hide`` becomes
exactly one operation, field for field under the same names, and every filesystem
operation of the plan is reached by exactly one record."""

from __future__ import annotations

import dataclasses

from pysandbox import fs, ops
from pysandbox.fs_ops import PLAN_OP, plan_kind, planned, with_records


def _mismatches(table) -> list[str]:
    """Record fields the operation lacks, and operation fields without a default that
    the record does not fill."""
    out = []
    for record, kind in table.items():
        have = {f.name for f in dataclasses.fields(record)}
        want = {f.name: f for f in dataclasses.fields(kind)}
        out += [f"{record.__name__}.{n} not in {kind.__name__}" for n in sorted(have - set(want))]
        out += [f"{kind.__name__}.{n} not filled" for n, f in want.items()
                if n not in have and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return out


def test_the_table_is_one_to_one_field_for_field():
    assert set(PLAN_OP) == set(fs.FS_OP_TYPES) - {fs.Hide}
    assert sorted(k.__name__ for k in PLAN_OP.values()) == sorted(k.__name__ for k in ops.MOUNT_OPS)
    assert _mismatches(PLAN_OP) == []


def test_the_check_finds_a_record_the_operation_cannot_hold():
    """Live control: a made-up record with a field its operation lacks, and an
    operation with a required field no record fills, are both found."""
    @dataclasses.dataclass(frozen=True)
    class Wide:
        dest: str
        colour: str

    @dataclasses.dataclass(frozen=True)
    class Needy:
        dest: str
        extra: int

    assert _mismatches({Wide: ops.MountProc, fs.Proc: Needy}) == [
        "Wide.colour not in MountProc", "Needy.extra not filled"]


def test_planned_copies_every_field(tmp_path):
    bind = fs.Bind(str(tmp_path), "/x", readonly=True, optional=True)
    assert planned(bind) == ops.BindMount(str(tmp_path), "/x", True, False, True, None)
    assert planned(fs.Tmpfs("/t", size=4096, mode=0o700)) == ops.MountTmpfs("/t", 4096, 0o700)
    overlay = fs.Overlay("/o", lower=(str(tmp_path),), tmp=True)
    assert planned(overlay, tmp_index=2).tmp_index == 2
    assert plan_kind(fs.Hide("/etc")) is None and plan_kind(bind) is ops.BindMount
    assert with_records(ops.BindMount) == (ops.BindMount, fs.Bind)


def test_native_needs_of_a_policy_read_through_the_table():
    """The native probe reads a Policy through the table without compiling it: the
    same needs as its compiled plan, and None is Policy.default()'s."""
    from pysandbox.backends.native.probe import Needs
    from pysandbox.plan import compile as compile_plan
    from pysandbox.policy import Policy
    default = Policy.default()
    assert Needs.of(None) == Needs.of(default) == Needs.of(compile_plan(default))
    no_proc = default.replace(fs=tuple(op for op in default.fs if not isinstance(op, fs.Proc)))
    assert Needs.of(no_proc).proc is False and Needs.of(default).proc is True   # control
    assert Needs.of(Policy.default(as_pid_1=True)).as_pid_1 is True
