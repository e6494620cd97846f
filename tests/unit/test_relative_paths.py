"""Relative paths, as ``subprocess`` takes them (issue 31, item 1; pysandbox/relpath.py):
``ro``/``rw``/``hide``/``tmpfs`` against the caller's directory, ``chdir`` against the
workdir. Resolved first, then judged: a relative name of a planted symlink or of a
too-broad directory is refused exactly as its absolute name is (docs/ARCHITECTURE.md,
invariants 10 and 15), each with the live control of the same policy allowed."""

from __future__ import annotations

import os

import pytest

from pysandbox import cli
from pysandbox.errors import PolicyError, Reason
from pysandbox.policy import Bind, Hide, Policy, Tmpfs
from pysandbox.relpath import from_caller


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "wd" / "sub").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path / "wd")
    return tmp_path


def test_relative_paths_are_the_callers_directorys(here):
    wd = str(here / "wd")
    policy = Policy.default(workdir=".", ro=["../data"], rw=["sub"], hide=["./sub/x"], tmpfs=["sub/t"],
                            chdir="sub")
    assert Bind(str(here / "data"), str(here / "data"), readonly=True) in policy.fs
    assert Bind(wd + "/sub", wd + "/sub") in policy.fs
    assert Hide(wd + "/sub/x") in policy.fs and Tmpfs(wd + "/sub/t") in policy.fs
    assert policy.chdir == wd + "/sub"                     # chdir: the workdir's, as cwd= is
    assert Policy.default(chdir="sub").chdir == "/sub"     # no workdir: the start directory /'s
    assert Bind(wd + "/sub", wd + "/sub", readonly=True) in Policy.default(ro=[os.fsencode("sub")]).fs


def test_dotdot_after_a_name_is_refused_not_resolved_lexically(here):
    os.symlink(str(here / "data"), here / "wd" / "link")
    # lexically link/.. is the workdir; to the kernel it is data's parent: neither is guessed
    with pytest.raises(PolicyError) as info:
        Policy.default(ro=["link/../sub"])
    assert info.value.reason is Reason.INVALID_PATH and info.value.field == "ro"
    assert from_caller("../data") == str(here / "data")    # control: leading .. climbs the real parent
    assert from_caller("/abs") == "/abs" and from_caller("") == ""


def test_a_planted_symlink_named_relatively_is_refused(here):
    wd = here / "wd"
    os.symlink("../data", wd / "cache")
    for kw in (dict(rw=["cache"]), dict(ro=["./cache"]), dict(hide=["cache/key"]), dict(tmpfs=["cache"]),
               dict(chdir="cache")):
        with pytest.raises(PolicyError) as info:
            Policy.default(workdir=".", **kw)
        assert info.value.reason is Reason.SYMLINK_IN_PATH, (kw, info.value)
        # control: the same relative name without a writable workdir around it is followed
        if "chdir" not in kw and "hide" not in kw:
            Policy.default(**kw)


def test_a_too_broad_directory_named_relatively_is_refused(here, monkeypatch):
    monkeypatch.setenv("HOME", str(here / "wd"))
    monkeypatch.chdir(here / "wd" / "sub")
    with pytest.raises(PolicyError) as info:
        Policy.default(rw=[".."])
    assert info.value.reason is Reason.WRITABLE_PATH_TOO_BROAD
    assert str(here / "wd") in Policy.default(rw=[".."], allow_broad_writable=True).writable_host_paths
    assert str(here / "wd" / "sub") in Policy.default(rw=["."]).writable_host_paths   # control: below it


def test_cli_accepts_relative_paths(here):
    args = cli.build_parser().parse_args(["run", "--ro", "../data", "--rw", "sub", "--hide", "sub/h",
                                          "--tmpfs", "./sub/t", "--chdir", "sub", "--", "true"])
    policy = cli._policy(args)
    wd = str(here / "wd")
    assert policy.chdir == wd + "/sub"
    assert Bind(wd + "/sub", wd + "/sub") in policy.fs and Hide(wd + "/sub/h") in policy.fs
