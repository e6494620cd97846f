"""Git metadata in the writable paths (pysandbox/gitmeta.py): the command cannot plant
what the host's git runs later, unsandboxed. Every attempt has its control beside it:
the same attempt with ``protect_git=False`` lands (and, for the end-to-end case, the
host's own git then runs the planted command: the attack is real)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import pysandbox
from tests.support import need

pytestmark = pytest.mark.requires("userns")

# Each attempt a separate step, its exit status printed: "name rc".
ATTEMPTS = r'''
cd "$1"
try() { name=$1; shift; ( "$@" ) >/dev/null 2>&1; echo "$name $?"; }
try hook sh -c 'echo "#!/bin/sh" > .git/hooks/pre-commit'
try config sh -c 'printf "[core]\n\tfsmonitor = /bin/false\n" >> .git/config'
try commondir sh -c 'echo ../evil > .git/commondir'
try rename mv .git moved-git
try remove rm -rf .git
try project sh -c 'echo work > made-inside'
'''


def _repo(root) -> str:
    """A repository-shaped project: .git/{config,hooks/,HEAD} made by hand (no git needed)."""
    repo = os.path.join(root, "proj")
    os.makedirs(os.path.join(repo, ".git", "hooks"))
    for name, text in (("config", "[core]\n\trepositoryformatversion = 0\n"), ("HEAD", "ref: refs/heads/main\n")):
        with open(os.path.join(repo, ".git", name), "w") as f:
            f.write(text)
    return repo


def _attempt(backend, repo, **policy_kw) -> dict:
    """The attempts in ``repo`` (a directory or a Workspace), each's exit status by name."""
    policy = pysandbox.Policy.default(workdir=repo, **policy_kw)
    done = pysandbox.run(["sh", "-c", ATTEMPTS, "sh", getattr(repo, "project", repo)], policy=policy, backend=backend,
                         capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {name: int(rc) for name, rc in (line.split() for line in done.stdout.decode().splitlines())}


@pytest.mark.parametrize("protect", [True, False])
def test_git_metadata_of_the_workdir_is_read_only(backend, tmp_path, protect):
    repo = _repo(str(tmp_path))
    got = _attempt(backend, repo, **({} if protect else {"protect_git": False}))
    assert got["project"] == 0, got          # control: the project itself is writable
    if protect:
        assert {k: v != 0 for k, v in got.items() if k != "project"} == dict.fromkeys(
            ("hook", "config", "commondir", "rename", "remove"), True), got
        assert sorted(os.listdir(os.path.join(repo, ".git"))) == ["HEAD", "config", "hooks"]
        assert "fsmonitor" not in open(os.path.join(repo, ".git", "config")).read()
    else:   # control: the same attempts land
        assert got["hook"] == got["config"] == got["commondir"] == got["rename"] == 0, got


def test_a_linked_worktrees_git_file_cannot_be_replaced(backend, tmp_path):
    repo = os.path.join(str(tmp_path), "wt")
    os.makedirs(repo)
    with open(os.path.join(repo, ".git"), "w") as f:
        f.write("gitdir: /nonexistent/main/.git/worktrees/wt\n")
    script = 'cd "$1"; echo "gitdir: ./evil" > .git; echo w $?; mv .git g 2>/dev/null; echo m $?; echo ok > x; echo x $?'
    policy = pysandbox.Policy.default(workdir=repo)
    out = pysandbox.run(["sh", "-c", script, "sh", repo], policy=policy, backend=backend, capture_output=True,
                        timeout=120).stdout.decode().split()
    assert out[1] != "0" and out[3] != "0" and out[5] == "0", out
    assert open(os.path.join(repo, ".git")).read().startswith("gitdir: /nonexistent")
    # control: with the opt-out the pointer is replaced
    policy = pysandbox.Policy.default(workdir=repo, protect_git=False)
    out = pysandbox.run(["sh", "-c", script, "sh", repo], policy=policy, backend=backend, capture_output=True,
                        timeout=120).stdout.decode().split()
    assert out[1] == "0", out


def test_a_git_dir_the_caller_names_stays_writable(backend, tmp_path):
    repo = _repo(str(tmp_path))
    git = os.path.join(repo, ".git")
    policy = pysandbox.Policy.default(workdir=repo, rw=[git])
    done = pysandbox.run(["sh", "-c", f"echo x > {git}/hooks/h"], policy=policy, backend=backend, timeout=120)
    assert done.returncode == 0 and os.path.exists(os.path.join(git, "hooks", "h"))


def test_the_hosts_git_never_runs_what_the_command_planted(backend, tmp_path):
    """End to end, with the real git: the command sets core.fsmonitor to a script of its
    own; the host's next `git status` would run it. Control: with the opt-out it does."""
    if shutil.which("git") is None:
        need("git", "git missing")
    for protect in (True, False):
        repo = os.path.join(str(tmp_path), f"p{int(protect)}")
        subprocess.run(["git", "init", "-q", repo], check=True)
        marker = os.path.join(str(tmp_path), f"ran-on-host-{int(protect)}")
        plant = (f'printf "#!/bin/sh\\ntouch {marker}\\n" > {repo}/monitor; chmod +x {repo}/monitor; '
                 f'git -C {repo} config core.fsmonitor {repo}/monitor')
        policy = pysandbox.Policy.default(workdir=repo, protect_git=protect)
        done = pysandbox.run(["sh", "-c", plant], policy=policy, backend=backend, capture_output=True, timeout=120)
        assert (done.returncode != 0) == protect, done.stderr
        subprocess.run(["git", "-C", repo, "status", "--short"], capture_output=True, timeout=60)
        assert os.path.exists(marker) == (not protect), protect


@pytest.mark.parametrize("opt_out", [False, True])
def test_cli_writable_git(backend, tmp_path, opt_out):
    repo = _repo(str(tmp_path))
    flags = ["--writable-git"] if opt_out else []
    done = subprocess.run([sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--workdir", repo, *flags,
                           "--", "sh", "-c", "echo x > .git/hooks/h"], cwd=repo, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode == 0) == opt_out, done.stderr
    assert os.path.exists(os.path.join(repo, ".git", "hooks", "h")) == opt_out


def test_status_names_the_protected_git(tmp_path):
    repo = _repo(str(tmp_path))
    st = pysandbox.status(pysandbox.Policy.default(workdir=repo))
    assert st.git["protected"] == [os.path.join(repo, ".git")] and "--writable-git" in st.git["opt_out"]
    assert pysandbox.status(pysandbox.Policy.default(workdir=repo, protect_git=False)).git["protected"] == []


@pytest.mark.requires("native")
@pytest.mark.parametrize("protect", [True, False])
def test_a_workspaces_git_metadata_is_read_only_too(tmp_path, protect):
    """A Workspace's writes are committed to the host later: a planted ``.git/config``
    would be one change among many in the review. The overlay counts as a writable path,
    so its ``.git`` is the host's, read-only; the control (``protect_git=False``) shows
    the same attempts land in the layer and in the change set."""
    from pysandbox.workspace import Workspace
    repo = _repo(str(tmp_path))
    ws = Workspace(repo, store_dir=str(tmp_path))
    try:
        got = _attempt("native", ws, **({} if protect else {"protect_git": False}))
        assert got["project"] == 0, got          # control: the project itself is writable
        changed = {c.path for c in ws.changes()}
        if protect:
            assert [k for k, v in got.items() if k != "project" and v == 0] == [], got
            assert changed == {"made-inside"}, changed
            st = pysandbox.status(pysandbox.Policy.default(workdir=ws))
            assert st.git["protected"] == [os.path.join(repo, ".git")], st.git
        else:
            assert got["hook"] == got["config"] == got["commondir"] == 0, got
            # planted, then moved away (the rename attempt) and a .git removed: all in the change set
            assert {".git", "moved-git/config", "moved-git/commondir", "moved-git/hooks/pre-commit"} <= changed
    finally:
        ws.remove()
