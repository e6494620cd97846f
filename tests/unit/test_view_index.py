"""pysandbox.view's index (view.View): the same answers as a walk over every op, for the
cost of the path's depth. The answers are checked against the walk on generated op lists;
the cost is checked as operation COUNTS (is_mount calls, an op's questions), never wall
time: a command line of thousands of binds (srt emits one per denied path) must grow
linearly through the parser, the mapping, the plan and the native translation."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from pysandbox import fs as F
from pysandbox import view


# ---------------------------------------------------------------- the walk it replaces

def _naive_cover(path, done):
    for i in range(len(done) - 1, -1, -1):
        if view.is_mount(done[i]) and view.under(path, done[i].dest):
            return i
    return -1


def _naive_made(path, ops):
    below = path.rstrip("/") + "/"
    return next((op for op in ops if getattr(op, "dest", None) == path
                 or (getattr(op, "dest", None) or "").startswith(below)), None)


def _naive_exists(path, ops):
    i = _naive_cover(path, ops)
    if _naive_made(path, ops[i + 1:]) is not None:
        return True
    if i < 0:
        return path == "/"
    op = ops[i]
    if isinstance(op, F.Bind):
        rest = path[len(op.dest):] if op.dest != "/" else path
        return os.path.lexists((op.src.rstrip("/") + rest) or "/")
    return path == op.dest


NAMES = st.sampled_from(["a", "b", "ab", "a/b", "b/a", "a/b/c"])


@st.composite
def fs_ops(draw):
    dest = "/" + draw(NAMES) if draw(st.booleans()) else "/"
    kind = draw(st.sampled_from(["bind", "tmpfs", "dir", "file", "symlink", "chmod", "proc"]))
    if kind == "bind":
        return F.Bind(draw(st.sampled_from(["/usr", "/etc", "/"])), dest, readonly=draw(st.booleans()))
    if kind == "tmpfs":
        return F.Tmpfs(dest)
    if kind == "dir":
        return F.Dir(dest)
    if kind == "file":
        return F.File(dest, data=b"", bind=draw(st.booleans()))
    if kind == "symlink":
        return F.Symlink("x", dest)
    if kind == "proc":
        return F.Proc(dest)
    return F.Chmod(dest, 0o755)


@settings(max_examples=300, deadline=None)
@given(st.lists(fs_ops(), max_size=12), st.sampled_from(["/", "/a", "/a/b", "/a/b/c", "/b", "/ab", "/a/", "/c"]))
def test_index_answers_as_the_walk(ops, path):
    indexed = view.View(ops)
    assert indexed == ops
    assert indexed.cover(path) == _naive_cover(path, ops)
    for limit in range(len(ops) + 1):
        assert indexed.cover(path, limit) == _naive_cover(path, ops[:limit])
        assert view.host_path(path, indexed, limit) == view.host_path(path, ops[:limit])
    for start in range(len(ops) + 1):
        i = indexed.made_at_or_below(path, start)
        assert (ops[i] if i >= 0 else None) is _naive_made(path, ops[start:])
    assert view.exists(path, indexed) == view.exists(path, ops) == _naive_exists(path, ops)


def test_index_refuses_what_would_make_it_stale():
    indexed = view.View([F.Tmpfs("/a")])
    for change in (lambda: indexed.insert(0, F.Tmpfs("/b")), lambda: indexed.pop(),
                   lambda: indexed.__setitem__(0, F.Tmpfs("/b")), lambda: indexed.clear()):
        with pytest.raises(TypeError):
            change()
    indexed += [F.Tmpfs("/b")]
    assert indexed.cover("/b/c") == 1 and indexed[:1] == [F.Tmpfs("/a")]


# ---------------------------------------------------------------- linear in the number of binds

def _sources(base, n):
    paths = []
    for i in range(n):
        d = os.path.join(base, f"d{i % 10}")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"f{i}")
        open(p, "w").close()
        paths.append(p)
    return paths


def _count_is_mount(monkeypatch, work) -> int:
    calls = [0]
    real = view.is_mount

    def counting(op):
        calls[0] += 1
        return real(op)

    monkeypatch.setattr(view, "is_mount", counting)
    try:
        work()
    finally:
        monkeypatch.setattr(view, "is_mount", real)
    return calls[0]


def _pybwrap_policy_and_plan(paths, missing=False):
    from bwrap_compat.mapping import to_policy
    from bwrap_compat.parser import parse
    from pysandbox import plan
    argv = ["--ro-bind", "/", "/", "--tmpfs", "/tmp"]
    for p in paths:
        argv += ["--ro-bind", p, p]
    if missing:
        argv += ["--ro-bind", "/nonexistent-pysandbox-test/x", "/y"]
    policy, _ = to_policy(parse(argv + ["true"]), real_uid=1000, start_caps=frozenset())
    return plan.compile(policy, outer_ids=(1000, 1000))


def test_is_mount_calls_grow_linearly_with_the_binds(tmp_path, monkeypatch):
    """Parse, mapping (bwrap's parents) and plan compile: 4x the binds, about 4x the
    is_mount calls (the walk made 16x: 69 million calls for srt's 2,518 binds). The
    control: the walk itself, on the same ops, is quadratic."""
    paths = _sources(str(tmp_path), 400)
    small = _count_is_mount(monkeypatch, lambda: _pybwrap_policy_and_plan(paths[:100]))
    large = _count_is_mount(monkeypatch, lambda: _pybwrap_policy_and_plan(paths))
    assert small > 100 and large <= 4.5 * small, (small, large)
    ops = [F.Bind(p, p, readonly=True) for p in paths]
    walk = lambda n: _count_is_mount(monkeypatch, lambda: [_naive_cover(op.dest, ops[:i])  # noqa: E731
                                                           for i, op in enumerate(ops[:n])])
    assert walk(400) > 10 * walk(100)


def test_native_translation_is_linear(tmp_path, monkeypatch):
    from pysandbox.backends.native import native_translate
    paths = _sources(str(tmp_path), 400)
    plans = {n: _pybwrap_policy_and_plan(paths[:n]) for n in (100, 400)}
    counts = {n: _count_is_mount(monkeypatch, lambda plan=plan: native_translate.translate(plan))
              for n, plan in plans.items()}
    assert counts[100] > 100 and counts[400] <= 4.5 * counts[100], counts


def test_refusal_reads_no_op_past_the_missing_source(tmp_path, monkeypatch):
    """bwrap resolves every source before its setup: a missing one is refused after the
    parse and the realpaths, with no op mapped (no is_mount call at all)."""
    from pysandbox.errors import BwrapArgumentError
    paths = _sources(str(tmp_path), 200)

    def refused():
        with pytest.raises(BwrapArgumentError, match="Can't find source path /nonexistent-pysandbox-test/x"):
            _pybwrap_policy_and_plan(paths, missing=True)

    assert _count_is_mount(monkeypatch, refused) == 0
    assert _count_is_mount(monkeypatch, lambda: _pybwrap_policy_and_plan(paths)) > 0   # control
