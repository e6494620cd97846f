"""pysandbox/gitmeta.py: which .git entries Policy.default binds read-only (the launch is
attacked in tests/security/test_git_metadata.py)."""

from __future__ import annotations

import os

import pytest

from pysandbox import Bind, Policy
from pysandbox.errors import PolicyError
from pysandbox.gitmeta import protected


def _git_binds(policy):
    return [op for op in policy.fs if isinstance(op, Bind) and op.dest.endswith("/.git")]


def test_the_workdirs_and_rw_paths_git_is_bound_read_only_after_them(tmp_path):
    for d in ("w/.git", "r/.git", "ro/.git", "plain"):
        (tmp_path / d).mkdir(parents=True)
    w, r, ro = (str(tmp_path / n) for n in ("w", "r", "ro"))
    policy = Policy.default(workdir=w, rw=[r], ro=[ro])
    binds = _git_binds(policy)
    assert sorted(b.dest for b in binds) == [f"{r}/.git", f"{w}/.git"] and all(b.readonly for b in binds)
    order = [getattr(op, "dest", None) for op in policy.fs]
    assert order.index(f"{w}/.git") > order.index(w) and order.index(f"{r}/.git") > order.index(r)
    # controls: no .git, a read-only path, the opt-out
    assert _git_binds(Policy.default(workdir=str(tmp_path / "plain"))) == []
    assert _git_binds(Policy.default(workdir=w, protect_git=False)) == []


def test_a_git_file_is_protected_a_symlink_is_not(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".git").write_text("gitdir: /x\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "real").mkdir()
    os.symlink(str(tmp_path / "real"), str(tmp_path / "b" / ".git"))
    assert protected([str(tmp_path / "a"), str(tmp_path / "b")]) == [str(tmp_path / "a" / ".git")]


def test_a_named_git_is_not_bound_over(tmp_path):
    (tmp_path / "w" / ".git").mkdir(parents=True)
    w = str(tmp_path / "w")
    assert _git_binds(Policy.default(workdir=w, rw=[f"{w}/.git"])) == [Bind(f"{w}/.git", f"{w}/.git")]


def test_protect_git_must_be_a_bool(tmp_path):
    with pytest.raises(PolicyError) as err:
        Policy.default(workdir=str(tmp_path), protect_git="no")
    assert err.value.reason.value == "invalid_value"
