"""The command line without launching a sandbox: usage errors, --help, flags -> policy."""

from __future__ import annotations

import os
import re

import pytest

from pysandbox import cli, status_text
from pysandbox.backends.base import BackendStatus, CapabilityStatus
from pysandbox.policy import Bind, Env, Hide, Tmpfs
from pysandbox.status import Status

DESIGN_RUN = ("--backend", "--network", "--allow-host", "--workdir", "--no-workdir", "--rw", "--ro", "--hide", "--tmpfs",
              "--chdir", "--setenv", "--unsetenv", "--clearenv", "--share-session", "--pass-fd", "--timeout",
              # additions beyond the original command line (the authority switches), documented in README.md
              "--keep-authority-sockets", "--strict-unix",
              # the io_uring opt-in, environment allow-list
              "--allow-io-uring", "--keep-env",
              # perf_event_open/bpf/userfaultfd opt-in (README "The policy")
              "--allow-syscall", "--report-denials",
              # a terminal of its own (README: Interactive shell)
              "--tty", "--no-tty",
              # a scratch HOME (README "A scratch HOME")
              "--home", "--home-file",
              # the writable-path opt-ins (README "Writable paths")
              "--allow-broad-writable", "--follow-writable-symlinks",
              # TOML profiles (README "Profiles")
              "--profile",
              # resource limits (README "Resource limits", pysandbox/cli_limits.py)
              "--limit-memory", "--limit-pids", "--limit-cpu", "--limit-wall", "--limit-file-size",
              "--limit-open-files",
              # the credential stores' opt-out (README "The policy", pysandbox/credentials.py)
              "--no-hide-credentials",
              # git metadata's opt-out (README "Git metadata", pysandbox/gitmeta.py)
              "--writable-git",
              # workspaces (README "Workspaces", pysandbox/cli_workspace.py)
              "--workspace", "--commit", "--discard", "--allow-git")
DESIGN_STATUS = ("--backend", "--network", "--allow-host", "--json", "--profile", "--no-hide-credentials",
                 "--writable-git")


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv", [
    [], ["frobnicate"], ["run", "--network", "proxy", "--allow-host", "a b", "--", "true"], ["run", "--backend", "x", "--", "true"],
    ["run", "--workdir", "/tmp", "--no-workdir", "--", "true"], ["run", "--pass-fd", "1", "--", "true"],
    ["run", "--pass-fd", "x", "--", "true"], ["run", "--timeout", "-1", "--", "true"],
    ["run", "--timeout", "nan", "--", "true"], ["run", "--setenv", "ONLYNAME"], ["run", "--bogus", "--", "true"],
    ["status", "--network", "sideways"], ["run"], ["run", "--"],
])
def test_usage_errors_exit_2_without_traceback(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error:" in err


@pytest.mark.parametrize("argv, fragment", [
    (["run", "--rw", "relative/path", "--", "true"], "bind_source_missing"),   # relative: the caller's directory's
    (["run", "--rw", "a/../b", "--", "true"], "invalid_path"),                  # '..' after a name: not guessed
    (["run", "--ro", "/definitely/not/here/pysandbox", "--", "true"], "bind_source_missing"),
    (["run", "--setenv", "A=B", "x", "--", "true"], "invalid_value"),
    (["run", "--chdir", "rel", "--", "true"], "invalid_path"),   # relative: the workdir's; none there
    (["run", "--workdir", "/", "--", "true"], "workdir_too_broad"),
    (["run", "--workdir", "//.", "--", "true"], "workdir_too_broad"),
    (["run", "--allow-io-uring", "--", "true"], "conflicting_options"),                # network deny
    (["run", "--network", "allow", "--strict-unix", "--allow-io-uring", "--", "true"], "conflicting_options"),
    (["run", "--keep-env", "PATH", "--clearenv", "--", "true"], "conflicting_options"),
    (["run", "--keep-env", "A=B", "--", "true"], "invalid_value"),
])
def test_policy_mistakes_exit_2_with_the_reason(argv, fragment, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pysandbox: ") and fragment in err[0]


def test_help_lists_exactly_the_design_options(capsys):
    for sub, design in (("run", DESIGN_RUN), ("status", DESIGN_STATUS)):
        with pytest.raises(SystemExit) as info:
            cli.main([sub, "--help"])
        assert info.value.code == 0
        text = capsys.readouterr().out
        shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--help", "--verbose"}
        assert shown == set(design), sub


def test_flags_make_the_policy(tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "rw").mkdir()
    (tmp_path / "wd").mkdir()
    args = parse("run", "--network", "allow", "--workdir", str(tmp_path / "wd"), "--ro", str(tmp_path / "ro"),
                 "--rw", str(tmp_path / "rw"), "--hide", str(tmp_path / "ro" / "x"), "--tmpfs", "/mnt",
                 "--setenv", "A", "1", "--unsetenv", "B", "--clearenv", "--share-session", "--chdir", "/mnt",
                 "--", "echo", "hi")
    policy = cli._policy(args)
    assert args.command[-2:] == ["echo", "hi"]
    assert Bind(str(tmp_path / "ro"), str(tmp_path / "ro"), readonly=True) in policy.fs
    assert Bind(str(tmp_path / "rw"), str(tmp_path / "rw")) in policy.fs
    assert Bind(str(tmp_path / "wd"), str(tmp_path / "wd")) in policy.fs
    assert Hide(str(tmp_path / "ro" / "x")) in policy.fs and Tmpfs("/mnt") in policy.fs
    assert policy.env == Env(clear=True, set=(("A", "1"),), unset=("B",))
    assert policy.new_session is False and policy.chdir == "/mnt"
    assert policy.keep_authority_sockets is False and policy.strict_unix is False
    strict = cli._policy(parse("run", "--keep-authority-sockets", "--strict-unix", "--", "true"))
    assert strict.keep_authority_sockets is True and strict.strict_unix is True
    assert policy.network.mode == "allow"


def test_workdir_defaults_to_cwd_and_can_be_dropped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    policy = cli._policy(parse("run", "--network", "allow", "--", "true"))
    assert Bind(str(tmp_path), str(tmp_path)) in policy.fs and policy.chdir == str(tmp_path)
    assert policy.new_session is True
    policy = cli._policy(parse("run", "--network", "allow", "--no-workdir", "--", "true"))
    assert not policy.writable_paths and policy.chdir is None


def test_pass_fd_must_be_open(tmp_path):
    r, w = os.pipe()
    try:
        assert parse("run", "--pass-fd", str(r), "--", "true").pass_fd == [r]
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(SystemExit):
        parse("run", "--pass-fd", str(r), "--", "true")


def test_status_table_names_every_capability_and_reason():
    caps = [CapabilityStatus("user", True), CapabilityStatus("net", False, "network_namespace_unavailable", "no")]
    network = {"deny": CapabilityStatus("deny", False, "network_namespace_unavailable", "no"),
               "allow": CapabilityStatus("allow", True),
               "proxy": CapabilityStatus("proxy", False, "network_mode_unsupported", "")}
    bs = BackendStatus("bwrap", False, "network_namespace_unavailable", "no", caps, network, {"version": "0.8.0"})
    text = status_text.format_status(Status(False, "bwrap", bs.reason, bs.detail, {"bwrap": bs}, network, "deny"))
    assert "UNAVAILABLE: network_namespace_unavailable" in text
    assert re.search(r"network deny\s+no\s+network_namespace_unavailable", text)
    assert re.search(r"network allow\s+ok", text)
    assert re.search(r"network proxy\s+no\s+network_mode_unsupported", text)
    assert re.search(r"user\s+ok", text)


def _fake_pw(monkeypatch, home):
    import pwd

    class Entry:
        pw_dir = str(home)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: Entry())


@pytest.mark.parametrize("where", ["home", "ancestor", "root"])
def test_default_workdir_refuses_home_its_ancestors_and_root(tmp_path, monkeypatch, capsys, where):
    home = tmp_path / "a" / "b"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    _fake_pw(monkeypatch, tmp_path / "elsewhere")
    monkeypatch.chdir({"home": home, "ancestor": tmp_path / "a", "root": "/"}[where])
    assert cli.main(["run", "--network", "allow", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "workdir_too_broad" in err[0]
    if where != "root":
        assert "--workdir" in err[0]
        # an explicit --workdir of the same directory is too broad as a writable path
        # (writable_path_too_broad), unless the caller opts in
        with pytest.raises(cli_policy_error()) as info:
            cli._policy(parse("run", "--network", "allow", "--workdir", ".", "--", "true"))
        assert info.value.reason.value == "writable_path_too_broad"
        policy = cli._policy(parse("run", "--network", "allow", "--workdir", ".", "--allow-broad-writable",
                                   "--", "true"))
        assert os.getcwd() in policy.writable_paths
        assert not cli._policy(parse("run", "--network", "allow", "--no-workdir", "--", "true")).writable_paths


def test_default_workdir_also_checks_the_password_database_home(tmp_path, monkeypatch):
    home = tmp_path / "pwhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "not-this"))
    _fake_pw(monkeypatch, home)
    monkeypatch.chdir(home)
    with pytest.raises(cli_policy_error()) as info:
        cli._policy(parse("run", "--network", "allow", "--", "true"))
    assert info.value.reason.value == "workdir_too_broad"
    # below the home is a project directory: the default still applies
    (home / "proj").mkdir()
    monkeypatch.chdir(home / "proj")
    assert str(home / "proj") in cli._policy(parse("run", "--network", "allow", "--", "true")).writable_paths


def cli_policy_error():
    from pysandbox import PolicyError
    return PolicyError


def test_keep_env_and_allow_io_uring_flags():
    policy = cli._policy(parse("run", "--no-workdir", "--keep-env", "PATH", "--keep-env", "HOME",
                               "--unsetenv", "HOME", "--setenv", "X", "1", "--", "true"))
    assert policy.env.keep == ("PATH", "HOME") and policy.env.clear is False
    assert policy.env.apply({"PATH": "/bin", "HOME": "/h", "GITHUB_TOKEN": "s"}) == {"PATH": "/bin", "X": "1"}
    assert cli._policy(parse("run", "--no-workdir", "--", "true")).env.keep is None
    assert cli._policy(parse("run", "--no-workdir", "--", "true")).allow_io_uring is False
    assert cli._policy(parse("run", "--no-workdir", "--network", "allow", "--allow-io-uring",
                             "--", "true")).allow_io_uring is True


def test_allow_syscall_flag_is_repeatable_and_checked_by_the_policy():
    assert cli._policy(parse("run", "--no-workdir", "--", "true")).allow_syscalls == frozenset()
    policy = cli._policy(parse("run", "--no-workdir", "--allow-syscall", "bpf", "--allow-syscall", "userfaultfd",
                               "--", "true"))
    assert policy.allow_syscalls == frozenset({"bpf", "userfaultfd"})
    with pytest.raises(cli_policy_error()) as info:
        cli._policy(parse("run", "--no-workdir", "--allow-syscall", "ptrace", "--", "true"))
    assert info.value.field == "allow_syscalls"
    from pysandbox.cli_errors import describe
    line = describe(info.value, parse("run", "--no-workdir", "--allow-syscall", "ptrace", "--", "true"))
    assert line.startswith("invalid_value: --allow-syscall ptrace: "), line


def test_status_text_names_the_seccomp_refusals():
    from pysandbox import Policy, seccomp
    lines = status_text.seccomp_lines(seccomp.coverage(Policy.default(allow_syscalls=("bpf",))))
    assert "perf_event_open" in lines[0] and "userfaultfd" in lines[0] and "bpf" not in lines[0]
    assert "(EPERM)" in lines[0] and "io_uring_setup" in lines[0]
    assert "allowed by the policy: bpf" in lines[1]
    default = seccomp.coverage(Policy.default())
    assert {c: default["refused"][c] for c in seccomp.OPT_IN_CALLS} == dict.fromkeys(seccomp.OPT_IN_CALLS, "EPERM")
    assert default["allowed"] == []


def test_run_help_documents_the_environment_and_workdir_rules(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "GITHUB_TOKEN" in text and "AWS_*" in text and "workdir_too_broad" in text


def test_a_profile_value_error_names_the_profile_not_an_option_never_given(tmp_path, capsys):
    """Issue 31 item 5: ``--ro /opt`` beside a profile whose ``ro`` is not a list named
    ``--ro /opt: p4.toml:1: ro: ...``; the line names the file, line and key only.
    Control: an error of the option itself still names the option."""
    prof = tmp_path / "p4.toml"
    prof.write_text('ro = "/usr"\n')
    assert cli.main(["run", "--profile", str(prof), "--ro", "/opt", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pysandbox: invalid_value: {prof}:1: ro: must be a list of paths, not '/usr'"]
    assert cli.main(["run", "--ro", "/definitely/not/here/pysandbox", "--", "true"]) == 2
    assert capsys.readouterr().err.startswith("pysandbox: bind_source_missing: --ro /definitely/not/here")
