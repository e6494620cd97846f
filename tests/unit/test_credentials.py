"""pysandbox/credentials.py without a sandbox: which stores are known for which caller,
how hides go around the paths a policy names, the opt-outs (API, command line,
profile), the status report, and that pybwrap's policies hide none of it."""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import tempfile

import pytest

from pysandbox import Policy, cli, credentials, status_text
from pysandbox.errors import PolicyError, Reason
from pysandbox.fs import Hide
from tests.support import not_applicable

_MOVERS = [var for var, _, _ in credentials.ENV_STORES] + ["XDG_CONFIG_HOME", "XDG_DATA_HOME",
                                                              "XDG_CACHE_HOME", "SUDO_USER"]


@pytest.fixture
def home(monkeypatch):
    """$HOME with stores: .ssh/{id_ed25519,known_hosts,sub/deeper/x}, .aws/credentials, .netrc;
    outside /tmp, which Policy.default covers with its own tmpfs (coverage counts that)."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="pysandbox-test-", dir="/var/tmp"))
    yield from _home(top / "home", monkeypatch)
    shutil.rmtree(top, ignore_errors=True)


def _home(h, monkeypatch):
    (h / ".ssh" / "sub" / "deeper").mkdir(parents=True)
    (h / ".aws").mkdir()
    (h / "proj").mkdir()
    for rel in (".ssh/id_ed25519", ".ssh/known_hosts", ".ssh/sub/deeper/x", ".aws/credentials", ".netrc",
                "notes.txt"):
        (h / rel).write_text(rel)
    monkeypatch.setenv("HOME", str(h))
    for var in _MOVERS:
        monkeypatch.delenv(var, raising=False)
    yield h


def _mine(paths, h):
    return sorted(p for p in paths if p.startswith(str(h) + "/"))


def _hides(policy):
    return [op.path for op in policy.fs if isinstance(op, Hide)]


def test_candidates_cover_the_list_below_each_home_and_the_tools_variables(monkeypatch):
    for var in _MOVERS:
        monkeypatch.delenv(var, raising=False)
    env = {"HOME": "/h", "KUBECONFIG": "/k/a:relative:/k/b", "CARGO_HOME": "/c", "GNUPGHOME": "/",
           "XDG_CONFIG_HOME": "/x", "DOCKER_CONFIG": "relative"}
    got = {(s.path, s.source) for s in credentials.candidates(env)}
    assert {(f"/h/{rel}", "HOME") for _, rel in credentials.HOME_STORES} <= got
    assert {("/k/a", "KUBECONFIG"), ("/k/b", "KUBECONFIG"), ("/c/credentials", "CARGO_HOME"),
            ("/c/credentials.toml", "CARGO_HOME"), ("/x/gh", "XDG_CONFIG_HOME"),
            ("/x/gcloud", "XDG_CONFIG_HOME")} <= got
    assert not {p for p, src in got if src in ("GNUPGHOME", "DOCKER_CONFIG")}   # "/" and relative: ignored
    assert not {p for p, _ in got if p.startswith("/x/") and p.endswith(".ssh")}
    mine = pwd.getpwuid(os.getuid()).pw_dir
    assert f"{mine}/.ssh" in {p for p, _ in got}   # the password database's home too
    for must in (".ssh", ".gnupg", ".aws", ".config/gh", ".netrc", ".docker", ".kube", ".git-credentials",
                 ".config/gcloud", ".azure", ".pypirc", ".npmrc", ".cargo/credentials.toml", ".config/hub",
                 ".password-store", ".local/share/keyrings"):
        assert must in {rel for _, rel in credentials.HOME_STORES}, must


@pytest.mark.parametrize("euid", [0, 1000])
def test_system_stores_and_sudo_users_home_for_a_root_caller_only(monkeypatch, euid):
    other = next((e for e in pwd.getpwall() if e.pw_dir.startswith("/") and e.pw_dir != "/" and
                  e.pw_dir not in ("/h", pwd.getpwuid(os.getuid()).pw_dir)), None)
    if other is None:
        not_applicable("no second password database entry with a home")
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    got = {s.path: s.source for s in credentials.candidates({"HOME": "/h", "SUDO_USER": other.pw_name})}
    for path in ("/etc/shadow", "/etc/gshadow"):
        assert (got.get(path) == "root caller") is (euid == 0), path
    assert (got.get(f"{other.pw_dir}/.ssh") == "SUDO_USER") is (euid == 0)


def test_hides_go_around_named_paths(home):
    h = str(home)
    # nothing named: each store whole; the ordinary file and the workdir are not stores
    assert _mine(credentials.hides([f"{h}/proj"]), home) == [f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"]
    # a named store is shown; a named path inside a store shows just that path, its
    # siblings are hidden down to it
    got = _mine(credentials.hides([f"{h}/.netrc", f"{h}/.ssh/sub/deeper"]), home)
    assert got == [f"{h}/.aws", f"{h}/.ssh/id_ed25519", f"{h}/.ssh/known_hosts"]
    (home / ".ssh" / "sub" / "other").write_text("x")
    got = _mine(credentials.hides([f"{h}/.ssh/sub/deeper"]), home)
    assert f"{h}/.ssh/sub/other" in got and f"{h}/.ssh/sub" not in got and f"{h}/.ssh" not in got
    # a store inside a named path stays hidden
    assert _mine(credentials.hides([h]), home) == [f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"]


def test_a_symlink_in_a_store_around_a_named_path_is_hidden_where_it_points(home):
    h = str(home)
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "ssh_config").write_text("Host *")
    (home / ".ssh" / "config").symlink_to(home / "dotfiles" / "ssh_config")
    got = credentials.hides([f"{h}/.ssh/known_hosts"])
    assert f"{h}/dotfiles/ssh_config" in got and f"{h}/.ssh/config" not in got
    # one that leads to (an ancestor of) the named path cannot be hidden without it: refused
    (home / ".ssh" / "up").symlink_to(home)
    with pytest.raises(PolicyError) as err:
        credentials.hides([f"{h}/.ssh/known_hosts"])
    assert err.value.reason == Reason.CONFLICTING_OPTIONS and err.value.value == f"{h}/.ssh/up"
    assert f"{h}/.ssh" in credentials.hides([f"{h}/proj"])   # control: nothing named inside: hidden whole


def test_an_unlistable_store_around_a_named_path_fails_closed(home):
    if os.geteuid() == 0:
        not_applicable("root lists any directory")
    (home / ".ssh").chmod(0o311)
    try:
        with pytest.raises(PolicyError) as err:
            credentials.hides([f"{home}/.ssh/known_hosts"])
        assert err.value.reason == Reason.CONFLICTING_OPTIONS
        assert f"{home}/.ssh" in credentials.hides([])   # control: hidden whole needs no listing
    finally:
        (home / ".ssh").chmod(0o700)


def test_policy_default_hides_last_without_duplicates_and_opts_out(home):
    h = str(home)
    policy = Policy.default(workdir=f"{h}/proj", hide=[f"{h}/.ssh"])
    hides = _hides(policy)
    assert _mine(hides, home) == [f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"] and hides.count(f"{h}/.ssh") == 1
    first = next(i for i, op in enumerate(policy.fs) if isinstance(op, Hide) and op.path == f"{h}/.aws")
    assert all(isinstance(op, Hide) for op in policy.fs[first:])
    assert _mine(_hides(Policy.default(workdir=f"{h}/proj", hide_credentials=False)), home) == []
    assert _mine(_hides(Policy.default(workdir=f"{h}/proj", hide=[f"{h}/.ssh"], hide_credentials=False)),
                 home) == [f"{h}/.ssh"]
    with pytest.raises(PolicyError) as err:
        Policy.default(hide_credentials="no")
    assert err.value.reason == Reason.INVALID_VALUE and err.value.field == "hide_credentials"


def _run_args(*argv):
    return cli.build_parser().parse_args(["run", *argv, "--", "true"])


def test_command_line_and_profile_opt_outs(home, tmp_path, monkeypatch):
    h = str(home)
    monkeypatch.chdir(home / "proj")
    assert _mine(_hides(cli._policy(_run_args())), home) == [f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"]
    assert _mine(_hides(cli._policy(_run_args("--no-hide-credentials"))), home) == []
    from pysandbox.profile import load
    off, on = tmp_path / "off.toml", tmp_path / "on.toml"
    off.write_text('workdir = "."\nhide_credentials = false\n')
    on.write_text('workdir = "."\nhide_credentials = true\n')
    assert _mine(_hides(Policy.from_toml(str(off))), home) == []
    assert _mine(_hides(Policy.from_toml(str(on))), home) == [f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"]
    # a flag turns hiding off, never on: the profile's false stays false
    assert _mine(_hides(cli._policy(_run_args(), load(str(off)))), home) == []
    assert _mine(_hides(cli._policy(_run_args("--no-hide-credentials"), load(str(on)))), home) == []
    bad = tmp_path / "bad.toml"
    bad.write_text('hide_credentials = "no"\n')
    with pytest.raises(PolicyError) as err:
        load(str(bad))
    assert "hide_credentials" in str(err.value)


@pytest.mark.parametrize("name", ["ci", "inspect"])
def test_shipped_profiles_hide_the_stores(home, monkeypatch, name):
    monkeypatch.chdir(home / "proj")
    assert _mine(_hides(Policy.from_toml(name)), home) == [f"{home}/.aws", f"{home}/.netrc", f"{home}/.ssh"]


def test_a_scratch_home_covers_the_stores_and_status_says_so(home, monkeypatch):
    """The agent profile's scratch HOME (home.py): the tmpfs covers the stores, no hide is
    needed inside it, and the coverage report counts them hidden; a seeded store is
    readable, as a bind of it is. Control: the host home hides each store."""
    monkeypatch.chdir(home / "proj")
    agent = Policy.from_toml("agent")
    assert _mine(_hides(agent), home) == []
    cov = credentials.coverage(agent)
    assert str(home) in cov["hidden"] and not _mine(cov["readable"], home), cov
    seeded = credentials.coverage(Policy.default(workdir=".", home="tmpfs", home_files=[".aws"]))
    assert _mine(seeded["readable"], home) == [f"{home}/.aws"], seeded
    bare = credentials.coverage(Policy.default(workdir=".", home="tmpfs", hide_credentials=False))
    assert not _mine(bare["readable"], home)          # the tmpfs covers them without the hides
    host = credentials.coverage(Policy.default(workdir=".", hide_credentials=False))   # control
    assert _mine(host["readable"], home) == [f"{home}/.aws", f"{home}/.netrc", f"{home}/.ssh"]


def test_pybwrap_policies_hide_no_credentials(home):
    """bwrap parity: pybwrap builds its own Policy, with bwrap's semantics."""
    from bwrap_compat import check, parse, to_policy
    policy, _ = to_policy(check(parse(["--ro-bind", "/", "/", "--unshare-all", "true"])))
    assert _mine(_hides(policy), home) == []
    assert _mine(_hides(Policy.default()), home) != []   # control: the default hides them


def test_coverage_and_status_text(home):
    h = str(home)
    policy = Policy.default(workdir=f"{h}/proj", ro=[f"{h}/.ssh/known_hosts"])
    cov = credentials.coverage(policy)
    assert {f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh/id_ed25519"} <= set(cov["hidden"])
    assert not {f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"} & set(cov["readable"])
    assert "--no-hide-credentials" in cov["opt_out"] and "hide_credentials=False" in cov["opt_out"]
    lines = status_text.credential_lines(cov)
    assert lines[0].startswith("credentials: hidden ") and f"{h}/.aws" in lines[0]
    assert lines[2].startswith("  environment: left out ")
    assert lines[3].startswith("  opt out: --no-hide-credentials")
    off = credentials.coverage(Policy.default(workdir=f"{h}/proj", hide_credentials=False))
    assert {f"{h}/.aws", f"{h}/.netrc", f"{h}/.ssh"} <= set(off["readable"]) and not _mine(off["hidden"], home)
    assert "no credential store is hidden" in off["scope"]


def test_a_store_the_caller_cannot_read_is_not_hidden(home, monkeypatch):
    """A store the caller cannot read is out of its sandbox's reach already, and a hide of
    it may not be makeable (the uid 0 of ``unshare -r`` may not mount over
    /etc/ssl/private): it is left out. Control: the readable stores beside it are hidden.
    (Root reads everything, so the refusal is simulated for one path.)"""
    real_access = os.access
    netrc = str(home / ".netrc")
    monkeypatch.setattr(credentials.os, "access", lambda p, mode: p != netrc and real_access(p, mode))
    got = [store.path for store in credentials.present()]
    assert netrc not in got
    assert str(home / ".ssh") in got and str(home / ".aws") in got


@pytest.mark.parametrize("pattern", ["ssh_host_*_key", "*_key", "*", ".*", "a*", "*.pub", "ssh_host_*"])
def test_matching_is_globs_for_a_one_star_name(tmp_path, pattern):
    """credentials.matching (root's patterned stores without importing glob) lists what
    glob.glob lists; the names include the edge cases (no middle, a dot file, a
    directory, a dangling symlink)."""
    import glob
    from pysandbox.credentials import matching
    for name in ("ssh_host_rsa_key", "ssh_host_rsa_key.pub", "ssh_host__key", "ssh_host_key", ".ssh_host_x_key",
                 "other_key", "a", "ab"):
        (tmp_path / name).write_text("")
    (tmp_path / "ssh_host_dir_key").mkdir()
    (tmp_path / "ssh_host_gone_key").symlink_to(tmp_path / "missing")
    want = sorted(glob.glob(f"{tmp_path}/{pattern}"))
    assert want, "the control: glob finds something for every pattern here"
    assert matching(f"{tmp_path}/{pattern}") == want


def test_matching_of_a_missing_folder_is_empty_and_other_patterns_are_refused(tmp_path):
    from pysandbox.credentials import SYSTEM_STORES, matching
    assert matching(f"{tmp_path}/missing/ssh_host_*_key") == []
    with pytest.raises(ValueError):
        matching(f"{tmp_path}/*/x")
    with pytest.raises(ValueError):
        matching(f"{tmp_path}/a?b*")
    assert all(matching(path) is not None for _, path in SYSTEM_STORES if "*" in path)   # every shipped one is the form


def _present_by_realpath(environ):
    """credentials.present's list computed the plain way (issue 28 made present cheaper):
    os.path.realpath of each candidate that exists, first entry per real path, kept when
    readable (a directory: searchable)."""
    first: dict = {}
    for store in credentials.candidates(environ):
        real = os.path.realpath(store.path) if os.path.lexists(store.path) else None
        readable = real is not None and real != "/" and os.path.lexists(real) and \
            (os.access(real, os.R_OK) or os.path.isdir(real) and os.access(real, os.X_OK))
        if readable and real not in first:
            first[real] = credentials.CredentialStore(real, store.kind, store.source)
    return list(first.values())


def test_present_resolves_as_realpath_does(tmp_path):
    """Stores behind a symlinked home, a symlinked parent (.config), symlinked stores (to a
    directory, to a file, dangling), a file where a directory is expected, the same store
    reached twice: the same list as realpath on each."""
    real_home = tmp_path / "real-home"
    (real_home / ".aws").mkdir(parents=True)
    (tmp_path / "home").symlink_to(real_home)
    (tmp_path / "keys").mkdir()
    (real_home / ".ssh").symlink_to(tmp_path / "keys")
    (tmp_path / "cfg" / "gh").mkdir(parents=True)
    (real_home / ".config").symlink_to(tmp_path / "cfg")
    (tmp_path / "netrc").write_text("machine x\n")
    (real_home / ".netrc").symlink_to(tmp_path / "netrc")
    (real_home / ".kube").symlink_to(tmp_path / "no-such")
    (real_home / ".local").write_text("not a directory\n")
    (real_home / ".pgpass").write_text("x\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "AWS_CONFIG_FILE": str(tmp_path / "home" / ".aws" / "..")}
    got = credentials.present(env)
    assert got == _present_by_realpath(env)
    paths = {s.path for s in got}   # the control: the cases are there, resolved
    assert {str(real_home / ".aws"), str(tmp_path / "keys"), str(tmp_path / "cfg" / "gh"),
            str(tmp_path / "netrc"), str(real_home / ".pgpass")} <= paths
    assert not any("home/" in p and "real-home" not in p for p in paths)
