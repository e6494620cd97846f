"""What a policy makes writable (pysandbox/writable.py; README "Writable paths";
docs/ARCHITECTURE.md): a symlink inside a writable path is refused when a policy is
built (``symlink_in_path``) unless the caller opts in, and no writable host path is
``/``, a system tree, a home or an ancestor of one (``writable_path_too_broad``) unless
the caller opts in. Each attack has its control: the opt-in, a symlink outside the
writable paths, a directory below the too-broad one."""

from __future__ import annotations

import os
import pwd
import tempfile

import pytest

from pysandbox import writable
from pysandbox.errors import PolicyError, Reason
from pysandbox.policy import Bind, Overlay, Policy, Tmpfs


def refused(make) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        make()
    return info.value


@pytest.fixture
def planted(tmp_path):
    """A workdir in which an earlier command left ``cache -> ../secrets`` (the secrets
    directory beside it), and a directory ``elsewhere`` outside every writable path."""
    wd, secrets = tmp_path / "wd", tmp_path / "secrets"
    wd.mkdir()
    secrets.mkdir()
    (secrets / "key").write_text("secret")
    os.symlink("../secrets", wd / "cache")
    (tmp_path / "elsewhere").mkdir()
    return wd, secrets


@pytest.mark.parametrize("kind", ["rw", "ro", "hide", "tmpfs", "chdir", "parent", "overlay"])
def test_a_symlink_planted_in_the_workdir_is_refused(planted, kind):
    """The attack of item 3: ``--rw $WORKDIR/cache`` after ``ln -s ../secrets cache``
    bound ../secrets read-write. Every host path the policy names is walked."""
    wd, secrets = planted
    cache = str(wd / "cache")
    kw = {"rw": dict(rw=[cache]), "ro": dict(ro=[cache]), "hide": dict(hide=[cache + "/key"]),
          "tmpfs": dict(tmpfs=[cache]), "chdir": dict(chdir=cache), "parent": dict(rw=[cache + "/sub"])}
    if kind == "parent":
        (secrets / "sub").mkdir()

    def make(**extra):
        if kind == "overlay":
            return Policy(fs=(Bind("/", "/", readonly=True), Bind(str(wd), str(wd)),
                              Overlay("/mnt", lower=(cache,), tmp=True)), **extra)
        return Policy.default(workdir=wd, **kw[kind], **extra)

    exc = refused(make)
    assert exc.reason is Reason.SYMLINK_IN_PATH and exc.value.startswith(cache), exc
    assert "follow_writable_symlinks" in exc.args[0]
    # control: the caller's opt-in follows it, as before (the target is what is bound)
    policy = make(follow_writable_symlinks=True)
    if kind == "rw":
        assert Bind(str(secrets), str(secrets)) in policy.fs and str(secrets) in policy.writable_host_paths
    # control: the same names in a policy that cannot write where the symlink lies
    if kind == "overlay":
        Policy(fs=(Bind("/", "/", readonly=True), Overlay("/mnt", lower=(cache,), tmp=True)))
    elif kind == "chdir":
        Policy.default(workdir=wd.parent / "elsewhere", chdir=cache)
    else:
        Policy.default(workdir=wd.parent / "elsewhere", **kw[kind])


def test_a_bind_built_by_hand_is_walked_as_named(planted):
    wd, secrets = planted
    op = Bind(str(wd / "cache"), "/mnt/cache")
    assert op.src == str(secrets) and op.named_src == str(wd / "cache")
    exc = refused(lambda: Policy(fs=(Bind("/", "/", readonly=True), Bind(str(wd), str(wd)), op)))
    assert exc.reason is Reason.SYMLINK_IN_PATH
    Policy(fs=(Bind("/", "/", readonly=True), op))   # control: nothing writable holds the symlink
    # an overlay's upper directory is writable too: a lower named through a link in it
    upper, work = wd.parent / "upper", wd.parent / "work"
    upper.mkdir(), work.mkdir()
    os.symlink(str(secrets), upper / "link")
    exc = refused(lambda: Policy(fs=(Bind("/", "/", readonly=True),
                                     Overlay("/mnt", lower=(str(upper / "link"),), upper=str(upper), work=str(work)))))
    assert exc.reason is Reason.SYMLINK_IN_PATH and exc.value == str(upper / "link")


def test_a_symlink_outside_the_writable_paths_is_followed(planted, tmp_path):
    """Today's behaviour where nothing the sandbox writes is involved: a link the caller
    made outside (and the host's own, /var/run -> /run, /lib -> usr/lib)."""
    wd, secrets = planted
    os.symlink(str(secrets), tmp_path / "elsewhere" / "link")
    policy = Policy.default(workdir=wd, rw=[tmp_path / "elsewhere" / "link"])
    assert Bind(str(secrets), str(secrets)) in policy.fs
    host = [p for p in ("/var/run", "/lib", "/bin") if os.path.islink(p)]
    assert Policy.default(workdir=wd, ro=host, hide=[p + "/x" for p in host])


def test_a_writable_symlink_reached_through_an_outside_one_is_refused(planted, tmp_path):
    """``elsewhere/outer -> wd/cache -> ../secrets``: the walk follows the outer link (the
    caller's) and meets the planted one inside the workdir."""
    wd, _ = planted
    os.symlink(str(wd / "cache"), tmp_path / "elsewhere" / "outer")
    exc = refused(lambda: Policy.default(workdir=wd, rw=[tmp_path / "elsewhere" / "outer"]))
    assert exc.reason is Reason.SYMLINK_IN_PATH and str(wd / "cache") in exc.args[0]


@pytest.mark.parametrize("path", ["/", "/etc", "/usr", "/var", "/opt", "/run", "/root", "/dev", "/proc",
                                  "/lib", "/bin", "/usr/lib", "/var/lib", "/var/tmp", "/home"])
def test_a_too_broad_writable_path_is_refused(path):
    if not os.path.isdir(path):
        pytest.skip(f"{path} does not exist here")
    for make in (lambda **kw: Policy.default(rw=[path], network="allow", **kw),
                 lambda **kw: Policy(fs=(Bind("/", "/", readonly=True), Tmpfs("/mnt"), Bind(path, "/mnt")), **kw)):
        exc = refused(make)
        assert exc.reason is Reason.WRITABLE_PATH_TOO_BROAD and exc.value == os.path.realpath(path), exc
        assert "allow_broad_writable" in exc.args[0]
        assert os.path.realpath(path) in make(allow_broad_writable=True).writable_host_paths   # control: opt-in


def test_a_home_and_its_ancestors_are_too_broad_below_them_is_fine(tmp_path, monkeypatch):
    home = tmp_path / "users" / "me"
    (home / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for path in (home, home.parent):
        exc = refused(lambda: Policy.default(workdir=path))
        assert exc.reason is Reason.WRITABLE_PATH_TOO_BROAD, exc
        assert Policy.default(workdir=path, allow_broad_writable=True).chdir == str(path)   # control: opt-in
    assert Policy.default(workdir=home / "proj").chdir == str(home / "proj")   # control: a project below
    # every home of the password database, not the caller's only; /root too
    other = tmp_path / "someone"
    other.mkdir()
    entries = pwd.getpwall() + [pwd.struct_passwd(("someone", "x", 4242, 4242, "", str(other), "/bin/sh"))]
    monkeypatch.setattr(pwd, "getpwall", lambda: entries)
    assert refused(lambda: Policy.default(rw=[other])).reason is Reason.WRITABLE_PATH_TOO_BROAD
    assert writable.too_broad("/root") and writable.too_broad(str(other)) == "a home directory"
    assert writable.too_broad(str(other / "sub")) is None


def test_subdirectories_of_system_trees_stay_allowed():
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="psb-writable-") as below:
        assert below in Policy.default(rw=[below]).writable_host_paths
    for path in ("/opt/tool/cache", "/var/cache/tool", "/usr/local/src/x", "/run/user/1000/x"):
        assert writable.too_broad(path) is None, path


def test_an_overlay_upper_is_a_writable_path(tmp_path):
    (tmp_path / "lower").mkdir()
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="psb-writable-") as work:
        exc = refused(lambda: Policy(fs=(Bind("/", "/", readonly=True),
                                         Overlay("/mnt", lower=(str(tmp_path / "lower"),), upper="/var", work=work))))
        assert exc.reason is Reason.WRITABLE_PATH_TOO_BROAD and exc.value == "/var"


def test_pybwrap_keeps_bwrap_behaviour(planted):
    """bwrap binds what it is told (``--bind / /``, a symlink anywhere): the mapping opts in."""
    from bwrap_compat import check, parse, to_policy
    wd, secrets = planted
    policy = to_policy(check(parse(["--bind", "/", "/", "--bind", str(wd), str(wd), "--bind", str(wd / "cache"),
                                    "/mnt", "--", "true"], close_fd=lambda fd: None)))[0]
    assert policy.allow_broad_writable and policy.follow_writable_symlinks
    assert Bind("/", "/") in policy.fs and Bind(str(secrets), "/mnt") in policy.fs
    with pytest.raises(PolicyError):   # control: the same operations without the opt-ins
        policy.replace(allow_broad_writable=False, follow_writable_symlinks=False)


def test_the_opt_ins_must_be_bools():
    for name in ("allow_broad_writable", "follow_writable_symlinks"):
        assert refused(lambda: Policy(**{name: "yes"})).reason is Reason.INVALID_VALUE


def test_a_copy_that_changes_no_path_field_keeps_the_policy_time_judgement(tmp_path):
    """A session launches ``policy.replace(as_pid_1=True, ...)``: that copy must launch what
    the caller's policy allowed (as a one-shot launch of it would), not walk the host again;
    the launch's own no-follow checks still refuse a symlink swapped in since. Control: a
    copy that changes ``fs`` is judged again."""
    sub = tmp_path / "sub"
    sub.mkdir()
    policy = Policy.default(workdir=tmp_path, rw=[sub])
    sub.rmdir()
    os.symlink("/etc", sub)
    assert policy.replace(as_pid_1=True, pass_fds=()).as_pid_1
    with pytest.raises(PolicyError) as info:
        policy.replace(fs=policy.fs)
    assert info.value.reason is Reason.SYMLINK_IN_PATH
