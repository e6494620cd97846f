"""TOML profiles (pysandbox/profile.py): every key reaches the Policy, every mistake is a
PolicyError naming the file, line and key; the shipped profiles load; the command line
wins over a profile (README "Profiles")."""

from __future__ import annotations

import os
import textwrap

import pytest

from pysandbox import cli, profile
from pysandbox.errors import PolicyError
from pysandbox.policy import Bind, Hide, Policy, Tmpfs

SHIPPED = ("agent", "ci", "inspect")


def write(tmp_path, text, name="p.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def error(path_or_name, **kw) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        Policy.from_toml(path_or_name, **kw)
    return info.value


def test_every_key_reaches_the_policy(tmp_path):
    (tmp_path / "wd").mkdir()
    (tmp_path / "ro").mkdir()
    (tmp_path / "rw").mkdir()
    path = write(tmp_path, f"""\
        description = "all keys"
        network = "allow"
        workdir = "{tmp_path / 'wd'}"
        ro = ["{tmp_path / 'ro'}"]
        rw = ["{tmp_path / 'rw'}"]
        hide = ["{tmp_path / 'ro' / 'secret'}"]
        tmpfs = ["/mnt"]
        chdir = "/mnt"
        share_session = true
        keep_authority_sockets = true
        allow_io_uring = true
        allow_syscalls = ["userfaultfd", "perf_event_open"]
        hostname = "box"
        uid = 0
        gid = 0
        caps_keep = ["net_bind_service"]
        allow_nested_userns = true

        [env]
        keep = ["PATH"]
        unset = ["X"]
        set = {{ A = "1" }}

        [run]
        backend = "bwrap"
        timeout = 5
        """)
    p = Policy.from_toml(path)
    assert p.network.mode == "allow" and p.chdir == "/mnt" and p.hostname == "box"
    assert Bind(str(tmp_path / "wd"), str(tmp_path / "wd")) in p.fs
    assert Bind(str(tmp_path / "ro"), str(tmp_path / "ro"), readonly=True) in p.fs
    assert Bind(str(tmp_path / "rw"), str(tmp_path / "rw")) in p.fs
    assert Hide(str(tmp_path / "ro" / "secret")) in p.fs and Tmpfs("/mnt") in p.fs
    assert p.new_session is False and p.keep_authority_sockets and p.allow_io_uring
    assert p.allow_syscalls == frozenset({"userfaultfd", "perf_event_open"})
    assert (p.uid, p.gid, p.caps_keep, p.allow_nested_userns) == (0, 0, frozenset({"net_bind_service"}), True)
    assert p.env.keep == ("PATH",) and p.env.unset == ("X",) and p.env.set == (("A", "1"),)
    loaded = profile.load(path)
    assert loaded.get("run.backend") == "bwrap" and loaded.get("run.timeout") == 5
    # control: an empty profile is the default policy without a workdir
    assert Policy.from_toml(write(tmp_path, "", "empty.toml")) == Policy.default()


@pytest.mark.parametrize("text, key, line, reason", [
    ('network = "deny"\nnetwrok = "allow"\n', "netwrok", 2, "did you mean 'network'"),
    ('[env]\nkeeep = ["PATH"]\n', "env.keeep", 2, "did you mean 'keep'"),
    ('\n\n[run]\nbackend = "native"\ntimout = 3\n', "run.timout", 5, "did you mean 'timeout'"),
    ('strict_unix = "yes"\n', "strict_unix", 1, "must be true or false"),
    ('ro = "/usr"\n', "ro", 1, "must be a list of paths"),
    ('# c\n\nhide = ["a/../b"]\n', "hide", 3, "must not contain '..'"),
    ('ro = [\n  "/usr",\n  "/no/such/dir/x",\n]\n', "ro", 1, "bind source does not exist"),
    ('[run]\ntimeout = -1\n', "run.timeout", 2, "positive number"),
    ('[env]\nset = { "A=B" = "1" }\n', "env.set", 2, "environment name"),
    ('[env]\nclear = true\nkeep = ["PATH"]\n', "env.keep", 3, "keep"),
    ('network = "proxy!"\n', "network", 1, "network mode"),
    ('chdir = "/no/such/dir"\n', "chdir", 1, "no such directory"),
    ('env.keep = ["A=B"]\n', "env.keep", 1, "environment name"),
    ('tmpfs = ["/"]\n', "tmpfs", 1, "whole"),
    ('\nallow_syscalls = ["ptrace"]\n', "allow_syscalls", 2, "cannot be allowed"),
    ('allow_syscalls = "bpf"\n', "allow_syscalls", 1, "must be a list of system call names"),
])
def test_errors_name_file_line_and_key(tmp_path, text, key, line, reason):
    path = write(tmp_path, text)
    if key == "chdir":   # found at compile time, as for the command line
        from pysandbox.plan import compile as compile_plan
        with pytest.raises(PolicyError) as info:
            compile_plan(Policy.from_toml(path))
        exc = profile.load(path).locate(info.value)
    else:
        exc = error(path)
    assert str(exc.args[0]).startswith(f"{path}:{line}: {key}: "), exc.args[0]
    assert reason in exc.args[0]


def test_syntax_error_names_the_file_and_line(tmp_path):
    path = write(tmp_path, '\nnetwork = deny\n')
    exc = error(path)
    assert path in exc.args[0] and "line 2" in exc.args[0]


def test_missing_file_and_unknown_name(tmp_path):
    assert "cannot read profile" in error(str(tmp_path / "nope.toml")).args[0]
    exc = error("agnet")
    assert "did you mean 'agent'" in exc.args[0] and exc.field == "profile"


def test_key_line_scan():
    text = 'a = 1\n[env]\nkeep = []\n "set" = {}\n[run]\nkeep = 3\n'
    assert profile._key_line(text, "a") == 1
    assert profile._key_line(text, "env.keep") == 3
    assert profile._key_line(text, "env.set") == 4
    assert profile._key_line(text, "run.keep") == 6
    assert profile._key_line("env = { keep = [] }\n", "env.keep") == 1
    assert profile._key_line("x = 1\n", "y") is None   # control: not there


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_load_by_name_and_by_path(name, tmp_path, monkeypatch):
    assert name in profile.shipped()
    monkeypatch.chdir(tmp_path)
    by_name = Policy.from_toml(name)
    path = os.path.join(os.path.dirname(profile.__file__), "profiles", f"{name}.toml")
    assert Policy.from_toml(path) == by_name
    assert profile.load(name).get("description")


def test_workdir_dot_and_false(tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    dot = Policy.from_toml(write(tmp_path, 'workdir = "."\n'))
    assert dot.chdir == str(tmp_path / "proj") and str(tmp_path / "proj") in dot.writable_paths
    none = Policy.from_toml(write(tmp_path, 'workdir = false\nchdir = "."\n', "n.toml"))
    assert none.writable_paths == () and none.chdir == str(tmp_path / "proj")


# ---------------------------------------------------------------- the command line over a profile

def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_command_line_wins_lists_extend_flags_turn_on(tmp_path, monkeypatch):
    for d in ("wd", "wd2", "a", "b"):
        (tmp_path / d).mkdir()
    path = write(tmp_path, f"""\
        network = "allow"
        workdir = "{tmp_path / 'wd'}"
        ro = ["{tmp_path / 'a'}"]
        strict_unix = true
        [env]
        set = {{ A = "profile", B = "profile" }}
        unset = ["U1"]
        [run]
        backend = "bwrap"
        timeout = 9
        """)
    args = parse("run", "--profile", path, "--network", "deny", "--workdir", str(tmp_path / "wd2"),
                 "--ro", str(tmp_path / "b"), "--setenv", "A", "cli", "--unsetenv", "U2", "--timeout", "3",
                 "--", "true")
    loaded = profile.load(path)
    cli._launch_settings(args, loaded)
    p = cli._policy(args, loaded)
    assert p.network.mode == "deny" and p.chdir == str(tmp_path / "wd2")
    assert str(tmp_path / "wd") not in p.writable_paths
    ro = {op.src for op in p.fs if isinstance(op, Bind) and op.readonly}
    assert {str(tmp_path / "a"), str(tmp_path / "b")} <= ro
    assert dict(p.env.set) == {"A": "cli", "B": "profile"} and {"U1", "U2"} <= set(p.env.unset)
    assert p.strict_unix is True          # a profile's flag stays on
    assert (args.backend, args.timeout) == ("bwrap", 3)
    # control: without the command line's options the profile's values stand
    args = parse("run", "--profile", path, "--", "true")
    cli._launch_settings(args, loaded)
    p = cli._policy(args, loaded)
    assert p.network.mode == "allow" and p.chdir == str(tmp_path / "wd")
    assert (args.backend, args.timeout) == ("bwrap", 9)


def test_profile_workdir_dot_keeps_the_home_check(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(cli, "home_directories", lambda: {str(home)})
    monkeypatch.chdir(home)
    path = write(tmp_path, 'workdir = "."\n')
    args = parse("run", "--profile", path, "--", "true")
    with pytest.raises(PolicyError) as info:
        cli._policy(args, profile.load(path))
    assert info.value.reason.value == "workdir_too_broad"
    (home / "proj").mkdir()
    monkeypatch.chdir(home / "proj")   # control
    assert cli._policy(args, profile.load(path)).chdir == str(home / "proj")


def test_bad_profile_backend_names_the_key(tmp_path, capsys):
    path = write(tmp_path, '\n[run]\nbackend = "chroot"\n')
    assert cli.main(["run", "--profile", path, "--no-workdir", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: run.backend" in err and "auto, native or bwrap" in err


def test_a_profile_its_policy_can_write_is_refused(tmp_path, monkeypatch):
    """A command run under a profile must not be able to rewrite it for the next run."""
    (tmp_path / "proj").mkdir()
    inside = write(tmp_path / "proj", 'workdir = "."\n')
    monkeypatch.chdir(tmp_path / "proj")
    exc = error(inside)
    assert exc.reason.value == "conflicting_options" and exc.field == "profile"
    args = parse("run", "--profile", inside, "--", "true")
    with pytest.raises(PolicyError):
        cli._policy(args, profile.load(inside))
    with pytest.raises(PolicyError):   # also when the command line adds the writable path
        cli._policy(parse("run", "--profile", write(tmp_path, "", "out.toml"), "--rw", str(tmp_path), "--", "true"),
                    profile.load(str(tmp_path / "out.toml")))
    # controls: the same profile when the policy cannot write it; one outside the workdir
    assert cli._policy(parse("run", "--profile", inside, "--no-workdir", "--", "true"), profile.load(inside))
    outside = write(tmp_path, 'workdir = "."\n', "outside.toml")
    assert Policy.from_toml(outside).chdir == str(tmp_path / "proj")


def test_a_profile_named_through_a_writable_path_is_refused(tmp_path, monkeypatch):
    """``--profile ./sandbox.toml``, a symlink in the workdir to a profile outside: the
    real file is outside every writable path, but the command can re-point the link, so
    the next identical command line would load another profile. The path as named is
    walked, not only its target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    good = write(outside, 'network = "deny"\nallow_broad_writable = false\nfollow_writable_symlinks = false\n',
                 "good.toml")
    (tmp_path / "proj").mkdir()
    os.symlink(good, tmp_path / "proj" / "sandbox.toml")
    monkeypatch.chdir(tmp_path / "proj")
    for named in ("./sandbox.toml", str(tmp_path / "proj" / "sandbox.toml")):
        with pytest.raises(PolicyError) as info:
            cli._policy(parse("run", "--profile", named, "--", "true"), profile.load(named))
        assert info.value.reason.value == "conflicting_options" and info.value.field == "profile"
        assert "named through" in info.value.args[0]
        assert error(named, workdir=str(tmp_path / "proj")).reason.value == "conflicting_options"
    # a directory named on the way (proj/link/good.toml, link -> ../outside) counts as well
    os.symlink("../outside", tmp_path / "proj" / "link")
    assert error("./link/good.toml", workdir=str(tmp_path / "proj")).reason.value == "conflicting_options"
    # controls: the plain file outside the writable paths; the symlink when the policy
    # cannot write where it lies; a symlink outside the writable paths
    assert cli._policy(parse("run", "--profile", good, "--", "true"), profile.load(good))
    assert cli._policy(parse("run", "--profile", "./sandbox.toml", "--no-workdir", "--", "true"),
                       profile.load("./sandbox.toml"))
    os.symlink(good, outside / "link.toml")
    assert Policy.from_toml(str(outside / "link.toml"), workdir=str(tmp_path / "proj")).network.mode == "deny"


def test_shipped_profiles_are_package_data():
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "profiles/*.toml" in data["pysandbox"]
    assert "include pysandbox/profiles/*.toml" in (root / "MANIFEST.in").read_text()
    assert sorted(p.stem for p in (root / "pysandbox" / "profiles").glob("*.toml")) == list(SHIPPED)
