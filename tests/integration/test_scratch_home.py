"""A scratch HOME (issue 31 item 2; pysandbox/home.py): ``home="tmpfs"`` gives a
private, empty, writable HOME at the caller's path; the real home, its credential stores
included, stays out of reach and untouched, whatever the command writes; seeded entries
are read-only and a store below a seeded directory stays hidden. Each claim has its live
control (the same operation where the policy allows it)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

import pysandbox
from pysandbox.errors import PolicyError, Reason

pytestmark = pytest.mark.requires("userns")


@pytest.fixture
def home(monkeypatch):
    """A fake home outside /tmp with a project, a dotfile, a credential store (~/.ssh) and
    a directory holding another one (~/.config/gh)."""
    top = tempfile.mkdtemp(prefix="pysandbox-home-", dir="/var/tmp")
    for d in ("proj", ".ssh", ".config/gh"):
        os.makedirs(os.path.join(top, d))
    for name, text in ((".gitconfig", "[user]\n\tname = me\n"), (".ssh/id_ed25519", "SECRET-KEY\n"),
                       (".config/gh/hosts.yml", "SECRET-TOKEN\n"), (".config/tool.conf", "setting\n")):
        with open(os.path.join(top, name), "w") as f:
            f.write(text)
    monkeypatch.setenv("HOME", top)
    monkeypatch.chdir(os.path.join(top, "proj"))
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _sh(script, backend, **kw):
    policy = pysandbox.Policy.default(workdir=".", **kw)
    return pysandbox.run(["sh", "-c", script], policy=policy, backend=backend, capture_output=True, text=True,
                         timeout=120)


def test_scratch_home_is_writable_empty_and_private(backend, home):
    before = sorted(os.listdir(home))
    done = _sh('echo hi > ~/.bash_history && mkdir -p ~/.cache/x && cat ~/.bash_history; ls -A ~; echo "$HOME"',
               backend, home="tmpfs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hi", ".bash_history", ".cache", "proj", home]   # proj: the workdir inside
    assert sorted(os.listdir(home)) == before            # nothing reached the host's home
    # control: the caller's home, as before, is read-only
    host = _sh("echo hi > ~/.bash_history", backend)
    assert host.returncode != 0 and "Read-only" in host.stderr, host.stderr
    assert not os.path.exists(os.path.join(home, ".bash_history"))


def test_credentials_stay_out_of_reach_in_a_scratch_home(backend, home):
    read = "cat ~/.ssh/id_ed25519 ~/.config/gh/hosts.yml 2>&1; cat " + home + "/.ssh/id_ed25519 2>&1; true"
    for kw in (dict(home="tmpfs"), dict(home="tmpfs", hide_credentials=False),
               dict(home="tmpfs", home_files=[".config"])):
        done = _sh(read, backend, **kw)
        assert "SECRET" not in done.stdout, (kw, done.stdout)
    # control: the same read with the host's home and the stores shown
    shown = _sh(read, backend, hide_credentials=False)
    assert "SECRET-KEY" in shown.stdout and "SECRET-TOKEN" in shown.stdout, shown.stdout


def test_seeded_entries_are_read_only_and_a_store_below_them_hidden(backend, home):
    done = _sh("cat ~/.gitconfig ~/.config/tool.conf; echo x >> ~/.gitconfig || echo refused; "
               "cat ~/.config/gh/hosts.yml || echo hidden; echo new > ~/other && cat ~/other",
               backend, home="tmpfs", home_files=[".gitconfig", ".config"])
    assert done.stdout.split() == ["[user]", "name", "=", "me", "setting", "refused", "hidden", "new"], done
    with open(os.path.join(home, ".gitconfig")) as f:
        assert f.read() == "[user]\n\tname = me\n"


@pytest.mark.parametrize("kw, reason", [
    (dict(home="scratch"), Reason.INVALID_VALUE),
    (dict(home_files=[".gitconfig"]), Reason.CONFLICTING_OPTIONS),
    (dict(home="tmpfs", home_files=["/etc/passwd"]), Reason.INVALID_PATH),
    (dict(home="tmpfs", home_files=["../x"]), Reason.INVALID_PATH),
    (dict(home="tmpfs", home_files=[".missing"]), Reason.BIND_SOURCE_MISSING),
])
def test_bad_home_settings_are_policy_errors(home, kw, reason):
    with pytest.raises(PolicyError) as info:
        pysandbox.Policy.default(**kw)
    assert info.value.reason is reason and info.value.field in ("home", "home_files")


def test_the_agent_profile_has_a_scratch_home(home):
    policy = pysandbox.Policy.from_toml("agent", workdir=os.getcwd())
    assert pysandbox.Tmpfs(os.path.realpath(home)) in policy.fs
    assert not any(isinstance(op, pysandbox.Hide) and op.path.startswith(home + "/") for op in policy.fs)
