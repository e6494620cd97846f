"""Policy mistakes are PolicyErrors before any launch, with a reason and the field
they came from (the CLI names the option from it), each beside a live control."""

from __future__ import annotations

import os

import pytest

from pysandbox.errors import PolicyError
from pysandbox.plan import compile as compile_plan
from pysandbox.policy import Bind, Dir, Hide, Policy, Proc, Tmpfs


def refused(make) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        compile_plan(make())
    return info.value


def test_chdir_missing_not_a_directory_or_hidden(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    base = dict(workdir=tmp_path)
    cases = [
        (dict(chdir=str(tmp_path / "missing")), "invalid_path", "no such directory"),
        (dict(chdir=str(tmp_path / "f")), "invalid_path", "not a directory"),
        (dict(chdir="/tmp/nothing-made-here"), "invalid_path", "no such directory"),   # inside the private /tmp
        (dict(chdir=str(tmp_path / "d"), hide=[str(tmp_path / "d")]), "conflicting_options", "hidden"),
        (dict(hide=[str(tmp_path)]), "conflicting_options", "hidden"),    # the workdir itself hidden
        (dict(chdir="/proc/no-such-entry"), "invalid_path", "procfs"),
    ]
    for kw, reason, words in cases:
        exc = refused(lambda: Policy.default(**{**base, **kw}))
        assert (exc.reason.value, exc.field) == (reason, "chdir"), kw
        assert words in exc.args[0], exc.args[0]
    # controls: the same places where they exist and are visible
    for chdir in (str(tmp_path / "d"), "/tmp", "/proc/sys", "/proc/1", "/dev/shm", "/"):
        assert compile_plan(Policy.default(workdir=tmp_path, chdir=chdir)).chdir == chdir
    made = Policy(fs=(Tmpfs("/"), Dir("/made")), chdir="/made")   # made by the plan: known to exist
    assert compile_plan(made).chdir == "/made"


def test_mount_point_of_the_wrong_type(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    # (outside /tmp: the default policy's private /tmp shows nothing of tmp_path)
    exc = refused(lambda: Policy.default(tmpfs=["/etc/passwd"]))
    assert exc.reason.value == "invalid_path" and "not a directory" in exc.args[0]
    exc = refused(lambda: Policy(fs=(Bind("/", "/", readonly=True), Bind(str(tmp_path / "f"), str(tmp_path / "d")))))
    assert exc.reason.value == "invalid_path" and "is a directory" in exc.args[0]
    # controls: a tmpfs on a directory, a file on a file
    compile_plan(Policy.default(tmpfs=["/etc"]))
    compile_plan(Policy(fs=(Bind("/", "/", readonly=True), Bind(str(tmp_path / "f"), "/etc/hostname"))))


def test_bind_into_a_host_process_proc_entry():
    exc = refused(lambda: Policy.default(ro=["/proc/self"]))    # canonical: /proc/<this pid>
    assert exc.reason.value == "mount_point_missing" and "procfs" in exc.args[0]
    compile_plan(Policy.default(ro=["/proc/sys"]))             # control: an entry every procfs has
    compile_plan(Policy(fs=(Tmpfs("/"), Proc("/proc"))))


def test_root_as_hide_or_tmpfs_is_refused_but_rw_root_stays_the_callers():
    for kw, field in ((dict(hide=["/"]), "hide"), (dict(tmpfs=["/"]), "tmpfs")):
        with pytest.raises(PolicyError) as info:
            Policy.default(**kw)
        assert (info.value.reason.value, info.value.field) == ("invalid_path", field)
    with pytest.raises(PolicyError):
        Hide("/")
    assert Hide("/etc").path == "/etc" and Policy(fs=(Tmpfs("/"),)).fs == (Tmpfs("/"),)   # controls


def test_workdir_must_be_a_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    for wd, reason in ((tmp_path / "f", "invalid_path"), (tmp_path / "missing", "bind_source_missing")):
        with pytest.raises(PolicyError) as info:
            Policy.default(workdir=wd)
        assert (info.value.reason.value, info.value.field) == (reason, "workdir")
    assert Policy.default(workdir=tmp_path).chdir == str(tmp_path)    # control


def test_bind_sources_name_their_field(tmp_path):
    for field in ("ro", "rw"):
        with pytest.raises(PolicyError) as info:
            Policy.default(**{field: [str(tmp_path / "missing")]})
        assert (info.value.reason.value, info.value.field) == ("bind_source_missing", field)
        assert Policy.default(**{field: [str(tmp_path)]})    # control


def test_nesting_hint_only_with_evidence(monkeypatch):
    from pysandbox.probe import host
    monkeypatch.setattr(host, "nesting", lambda: None)
    assert host.nested_hint("userns") is None
    monkeypatch.setattr(host, "nesting", lambda: "this process already runs in a user namespace")
    assert host.nested_hint("userns").startswith("nested sandbox: ")
    assert "procfs" in host.nested_hint("proc")
    assert os.path.exists("/proc/self/uid_map")   # what nesting() reads


def test_writable_host_procfs_bind_is_refused():
    """Invariant 9: no host-global kernel knob writable, whatever the caller's uid; a
    read-write bind of the host's /proc/sys would hand a root caller's sysctls over.
    Also with allow_broad_writable (which lets /proc itself be writable otherwise)."""
    for src, dest in (("/proc/sys", "/proc/sys"), ("/proc", "/proc"), ("/proc/sys", "/mnt")):
        exc = refused(lambda: Policy(fs=(Bind("/", "/", readonly=True), Proc("/proc"), Bind(src, dest)),
                                     allow_broad_writable=True))
        assert exc.reason.value == "conflicting_options" and "procfs" in exc.args[0], (src, dest)
    for kw in (dict(rw=["/proc/sys"]), dict(rw=["/proc"], allow_broad_writable=True)):
        exc = refused(lambda: Policy.default(**kw))
        assert exc.reason.value == "conflicting_options"
    # controls: read-only, and pybwrap's shape (the whole /proc, every host-global entry
    # bound again read-only after it)
    compile_plan(Policy.default(ro=["/proc/sys"]))
    from pysandbox.ops import PROC_READONLY
    covers = tuple(Bind(f"/proc/{s}", f"/mnt/proc/{s}", readonly=True) for s in PROC_READONLY
                   if os.path.lexists(f"/proc/{s}"))
    compile_plan(Policy(fs=(Bind("/", "/", readonly=True), Tmpfs("/mnt"), Bind("/proc", "/mnt/proc")) + covers,
                        allow_broad_writable=True))   # as pybwrap's mapping says
    with pytest.raises(PolicyError):   # ... and without the covers it is refused
        compile_plan(Policy(fs=(Bind("/", "/", readonly=True), Tmpfs("/mnt"), Bind("/proc", "/mnt/proc")),
                            allow_broad_writable=True))
