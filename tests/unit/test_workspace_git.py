"""Git metadata a command made in a workspace (pysandbox/workspace_git.py): a nested
``.git``, a ``.git`` file, a bare repository (whole or completing one the host already
half holds) are refused at commit, the paths named, nothing applied; each beside a
control that commits (the honest files, and the same entries with ``allow_git=True``)."""

from __future__ import annotations

import os

import pytest

from pysandbox.errors import Reason, WorkspaceError
from pysandbox.workspace import Workspace


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "src").mkdir(parents=True)
    (p / "src" / "main.c").write_text("int main;\n")
    return p


@pytest.fixture
def ws(project, tmp_path):
    (tmp_path / "stores").mkdir()
    w = Workspace(project, store_dir=tmp_path / "stores")
    yield w
    w.remove()


def plant(ws, rel, text="x\n"):
    path = os.path.join(ws.upper, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


HOOK = "[core]\n\tfsmonitor = touch /tmp/pwned\n"


def _refused(ws, project, planted: list[str], want: set[str]):
    plant(ws, "src/honest.c", "ok\n")
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_UNSAFE_ENTRY
    assert want <= set(err.value.paths) and "src/honest.c" not in err.value.paths, err.value.paths
    assert "git metadata" in str(err.value)
    assert not (project / "src" / "honest.c").exists()   # nothing applied
    for rel in planted:
        assert not (project / rel).exists()
    ws.commit(paths=["src/honest.c"])                     # control: the rest commits
    assert (project / "src" / "honest.c").read_text() == "ok\n"


@pytest.mark.parametrize("where", [".git", "src/.git", "vendor/lib/.git"])
def test_a_git_directory_anywhere_is_refused(ws, project, where):
    planted = [f"{where}/config", f"{where}/hooks/pre-commit"]
    for rel in planted:
        plant(ws, rel, HOOK)
    _refused(ws, project, planted, set(planted))


def test_a_git_file_pointing_elsewhere_is_refused(ws, project):
    plant(ws, "src/.git", "gitdir: ../evil\n")
    _refused(ws, project, ["src/.git"], {"src/.git"})


def test_a_bare_repository_is_refused(ws, project):
    planted = ["tools/repo/HEAD", "tools/repo/config", "tools/repo/objects/keep", "tools/repo/refs/keep"]
    for rel in planted:
        plant(ws, rel, HOOK if rel.endswith("config") else "ref: refs/heads/main\n")
    _refused(ws, project, planted, {"tools/repo/config", "tools/repo/HEAD"})


def test_completing_a_bare_repository_the_host_half_holds_is_refused(ws, project):
    # objects/ and refs/ are ordinary directories on the host; the command adds HEAD and config
    for name in ("objects", "refs"):
        (project / "data" / name).mkdir(parents=True)
    plant(ws, "data/HEAD", "ref: refs/heads/main\n")
    plant(ws, "data/config", HOOK)
    _refused(ws, project, ["data/HEAD", "data/config"], {"data/HEAD", "data/config"})


def test_a_worktree_style_git_dir_with_commondir_is_refused(ws, project):
    plant(ws, "w/HEAD", "ref: refs/heads/main\n")
    plant(ws, "w/commondir", "../../.git\n")
    _refused(ws, project, ["w/HEAD", "w/commondir"], {"w/HEAD", "w/commondir"})


def test_names_like_git_that_are_not_git_metadata_commit(ws, project):
    # controls for the rule's edges: a HEAD without objects/refs, a .github, a .gitignore
    for rel in ("notes/HEAD", ".github/workflows/ci.yml", ".gitignore", "src/.gitkeep", "objects/x", "refs/y"):
        plant(ws, rel)
    done = {c.path for c in ws.commit()}
    assert {"notes/HEAD", ".github/workflows/ci.yml", ".gitignore", "src/.gitkeep"} <= done
    assert (project / "notes" / "HEAD").exists()


def test_allow_git_commits_them(ws, project):
    plant(ws, "src/.git/config", HOOK)
    with pytest.raises(WorkspaceError):
        ws.commit()
    ws.commit(allow_git=True)
    assert (project / "src" / ".git" / "config").read_text() == HOOK
