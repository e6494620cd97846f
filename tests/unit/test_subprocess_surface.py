"""The subprocess surface without a launch: cwd resolution and refusal (view.sandbox_cwd,
view.check_start_directory), close_fds=False and stdout= refused, the functions exported."""

from __future__ import annotations

import os
import subprocess

import pytest

import pysandbox
from pysandbox import view
from pysandbox.errors import Reason
from pysandbox.ops import Chdir
from pysandbox.process import compiled, with_start_directory


@pytest.fixture
def wd(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "secret").mkdir()
    return tmp_path


@pytest.fixture
def plan(wd):
    return compiled(pysandbox.Policy.default(workdir=str(wd), hide=[str(wd / "secret")], tmpfs=["/mnt"]))


def test_sandbox_cwd_is_relative_to_the_start_directory_and_normalised():
    assert view.sandbox_cwd("sub", "/w") == "/w/sub"
    assert view.sandbox_cwd(b"sub/../x/.", "/w") == "/w/x"
    assert view.sandbox_cwd("/abs//p", "/w") == "/abs/p"
    assert view.sandbox_cwd(os.fsencode("/d\udcff"), "/") == "/d\udcff"   # non-UTF-8 bytes kept
    for bad in ("", "a\x00b", b""):
        with pytest.raises(pysandbox.PolicyError) as info:
            view.sandbox_cwd(bad, "/w")
        assert info.value.reason == Reason.INVALID_PATH
    with pytest.raises(pysandbox.PolicyError):
        view.sandbox_cwd(3, "/w")


def test_start_directory_replaces_only_the_chdir(plan, wd):
    derived = with_start_directory(plan, "sub")
    assert derived.chdir == str(wd / "sub")
    assert [op for op in derived.ops if not isinstance(op, Chdir)] == \
        [op for op in plan.ops if not isinstance(op, Chdir)]
    assert with_start_directory(plan, "sub") is derived          # made once per (plan, directory)
    assert with_start_directory(plan, str(wd)) is plan           # the plan's own start directory
    for ok in ("/", "/usr", "/mnt", "/tmp", "/proc/self", "/dev"):   # live controls
        assert with_start_directory(plan, ok).chdir == ok


@pytest.mark.parametrize("where, reason, words", [
    ("missing", Reason.INVALID_PATH, "no such directory"),
    ("file", Reason.INVALID_PATH, "not a directory"),
    ("secret", Reason.CONFLICTING_OPTIONS, "hidden"),
    ("/mnt/missing", Reason.INVALID_PATH, "no such directory"),   # an empty tmpfs holds nothing
    ("/tmp/missing", Reason.INVALID_PATH, "no such directory"),
])
def test_start_directory_missing_in_the_view_is_refused(plan, where, reason, words):
    with pytest.raises(pysandbox.PolicyError) as info:
        with_start_directory(plan, where)
    assert info.value.reason == reason and words in str(info.value) and "cwd /" in str(info.value)


def test_popen_refuses_a_missing_cwd_before_anything_starts(wd):
    started = []
    with pytest.raises(pysandbox.PolicyError) as info:
        pysandbox.Popen(["true"], policy=pysandbox.Policy.default(workdir=str(wd)), cwd="missing",
                        on_start=started.append)
    assert info.value.reason == Reason.INVALID_PATH and started == []


@pytest.mark.parametrize("fn", [pysandbox.run, pysandbox.Popen, pysandbox.call, pysandbox.check_call,
                                pysandbox.check_output])
def test_close_fds_false_is_refused_not_ignored(fn, wd):
    with pytest.raises(pysandbox.PolicyError) as info:
        fn(["true"], policy=pysandbox.Policy.default(workdir=str(wd)), close_fds=False)
    assert info.value.reason == Reason.CONFLICTING_OPTIONS and "pass_fds" in str(info.value)


def test_check_output_refuses_stdout_as_subprocess_does():
    with pytest.raises(ValueError) as ours:
        pysandbox.check_output(["true"], stdout=subprocess.PIPE)
    with pytest.raises(ValueError) as theirs:
        subprocess.check_output(["true"], stdout=subprocess.PIPE)
    assert str(ours.value) == str(theirs.value)
