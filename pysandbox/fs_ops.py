"""The one table between the two vocabularies of filesystem operations: a Policy's
records (:mod:`pysandbox.fs`, what the caller asks, validated) and the plan's
operations (:mod:`pysandbox.ops`, named for the kernel action, what a backend runs).

Eleven of the twelve records become one operation each, field for field under the
same names (:data:`PLAN_OP` says which); the plan's operation may add fields of its
own with defaults (``MountTmpfs.readonly``, ``MountOverlay.tmp_index``). ``Hide`` is
the twelfth: it becomes a read-only tmpfs or an empty file bind by the hidden path's
type, which only ``plan.compile`` can know (``plan._compile_hide``).

Read by ``plan.compile`` (:func:`planned`), the sandbox's view, which reads a plan's
operations and a Policy's records alike (:func:`with_records`), and the native
backend's probe (:func:`plan_kind`: what a Policy would need, without compiling it).
``tests/unit/test_fs_ops.py`` checks the table is 1:1 field for field.
"""

from __future__ import annotations

from . import fs, ops
from .records import field_names

PLAN_OP: dict[type, type] = {
    fs.Bind: ops.BindMount, fs.Tmpfs: ops.MountTmpfs, fs.Overlay: ops.MountOverlay, fs.Proc: ops.MountProc,
    fs.Dev: ops.MinimalDev, fs.Mqueue: ops.MountMqueue, fs.Dir: ops.MakeDir, fs.Symlink: ops.MakeSymlink,
    fs.File: ops.WriteFile, fs.RemountRo: ops.RemountReadonly, fs.Chmod: ops.ChangeMode,
}


def plan_kind(record) -> type | None:
    """The plan operation ``record`` becomes (None: ``Hide``, or not a record)."""
    return PLAN_OP.get(type(record))


def planned(record, **extra):
    """The plan operation for ``record``: its fields copied by name, plus ``extra``
    (the operation's own fields, e.g. an overlay's ``tmp_index``)."""
    values = {name: getattr(record, name) for name in field_names(type(record))}
    return PLAN_OP[type(record)](**values, **extra)


def with_records(*kinds: type) -> tuple:
    """``kinds`` (plan operations) and every Policy record that becomes one of them."""
    return kinds + tuple(record for record, kind in PLAN_OP.items() if kind in kinds)
