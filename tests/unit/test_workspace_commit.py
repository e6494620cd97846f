"""The workspace review and commit engine on hand-made layers (no sandbox, no mount):
what overlayfs writes is obeyed (whiteouts, opaque dirs), what a command could plant is
not followed, and commit refuses the hostile entries beside a control that commits."""

from __future__ import annotations

import os
import stat

import pytest

from pysandbox import workspace_commit
from pysandbox.errors import Reason
from pysandbox.workspace import Workspace
from pysandbox.errors import WorkspaceError


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "d").mkdir(parents=True)
    (p / "d" / "f").write_text("host\n")
    (p / "top").write_text("top\n")
    return p


@pytest.fixture
def ws(project, tmp_path):
    (tmp_path / "stores").mkdir()
    w = Workspace(project, store_dir=tmp_path / "stores")
    yield w
    w.remove()


def up(ws, rel=""):
    return os.path.join(ws.upper, rel)


def whiteout(path):
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    except PermissionError:
        pytest.skip("mknod of a whiteout needs CAP_MKNOD (run as root)")


def test_a_whiteout_is_a_deletion_and_an_opaque_dir_hides_the_host(ws, project):
    whiteout(up(ws, "top"))
    os.mkdir(up(ws, "d"))
    os.setxattr(up(ws, "d"), "user.overlay.opaque", b"y")
    assert {c.path: c.kind for c in ws.changes()} == {"top": "deleted", "d/f": "deleted"}
    ws.commit()
    assert os.listdir(project) == ["d"] and os.listdir(project / "d") == []


def test_an_escaped_opaque_xattr_is_data(ws, project):
    os.mkdir(up(ws, "d"))
    os.setxattr(up(ws, "d"), "user.overlay.overlay.opaque", b"y")   # what the kernel stores for a command
    assert ws.changes() == []


def test_dir_swapped_for_a_symlink_after_review_is_refused(ws, project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkdir(up(ws, "new"))
    open(up(ws, "new/f"), "w").write("x")
    assert [c.path for c in ws.changes()] == ["new", "new/f"]
    os.rename(up(ws, "new"), up(ws, "moved"))
    os.symlink(outside, up(ws, "new"))
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_CHANGED
    assert os.listdir(outside) == [] and not (project / "new").exists()
    ws.changes()                                          # control: reviewed as it now is, it commits
    ws.commit()
    assert os.readlink(project / "new") == str(outside) and (project / "moved" / "f").read_text() == "x"


def test_a_host_dir_swapped_for_a_symlink_is_not_followed(ws, project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkdir(up(ws, "d"))
    open(up(ws, "d/new"), "w").write("x")
    ws.changes()
    os.rename(project / "d", project / "d.old")
    os.symlink(outside, project / "d")
    with pytest.raises(WorkspaceError):
        ws.commit()
    assert os.listdir(outside) == []


@pytest.mark.parametrize("mode", [0o4755, 0o2755])
def test_setuid_and_setgid_files_are_refused(ws, project, mode):
    open(up(ws, "s"), "w").write("x")
    os.chmod(up(ws, "s"), mode)
    open(up(ws, "honest"), "w").write("h")
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_UNSAFE_ENTRY and err.value.paths == ("s",)
    assert not (project / "honest").exists()
    ws.commit(paths=["honest"])                           # control
    assert (project / "honest").read_text() == "h" and not (project / "s").exists()


def test_a_device_node_is_refused(ws, project):
    try:
        os.mknod(up(ws, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD (run as root)")
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_UNSAFE_ENTRY and not (project / "null").exists()


def test_dotdot_and_unknown_paths_are_not_changes(ws, project):
    open(up(ws, "ok"), "w").write("o")
    for bad in ("../escape", "/etc/passwd", "nope"):
        with pytest.raises(WorkspaceError) as err:
            ws.commit(paths=[bad])
        assert err.value.reason == Reason.INVALID_PATH
    ws.commit(paths=["ok"])
    assert (project / "ok").read_text() == "o"


def test_hard_links_in_the_layer_are_committed_as_separate_files(ws, project):
    open(up(ws, "a"), "w").write("same")
    os.link(up(ws, "a"), up(ws, "b"))
    ws.commit()
    assert (project / "a").read_text() == (project / "b").read_text() == "same"
    assert os.stat(project / "a").st_ino != os.stat(project / "b").st_ino


def test_an_interrupted_commit_leaves_each_entry_old_or_new_and_finishes(ws, project, monkeypatch):
    for name in ("a", "b", "c"):
        open(up(ws, name), "w").write("new " + name)
    open(up(ws, "top"), "w").write("new top")
    real, calls = workspace_commit._apply_one, []

    def crash(c, *args):
        if len(calls) == 2:
            raise KeyboardInterrupt("interrupted")
        calls.append(c.path)
        return real(c, *args)
    monkeypatch.setattr(workspace_commit, "_apply_one", crash)
    with pytest.raises(KeyboardInterrupt):
        ws.commit()
    for name in ("a", "b", "c", "top"):
        body = (project / name).read_text() if (project / name).exists() else None
        assert body in (None, "top\n") or body.startswith("new "), (name, body)
    assert [n for n in os.listdir(project) if n.startswith(".pysandbox-commit-")] == []
    monkeypatch.setattr(workspace_commit, "_apply_one", real)
    assert [c.path for c in ws.changes()] == ["c", "top"]  # what was applied is no longer a change
    ws.commit()
    assert {n: (project / n).read_text() for n in ("a", "b", "c", "top")} == \
        {"a": "new a", "b": "new b", "c": "new c", "top": "new top"}


def test_review_and_diff_never_block_on_a_fifo(ws):
    os.mkfifo(up(ws, "p"))
    assert [c.type for c in ws.changes()] == ["fifo"]
    assert ws.diff() == ""


def test_an_entry_its_owner_cannot_read_fails_the_review_closed_for_a_user(ws, project):
    open(up(ws, "top"), "w").write("TOP\n")     # same size as the host's: the content must be read
    os.chmod(up(ws, "top"), 0)
    if os.geteuid() == 0:                       # root reads it: the change is seen (the control)
        assert [(c.path, c.kind) for c in ws.changes()] == [("top", "modified")]
        return
    with pytest.raises(WorkspaceError) as err:
        ws.changes()
    assert err.value.reason == Reason.WORKSPACE_LAYER_INVALID
    ws.discard()
    assert ws.changes() == []


def test_a_dropped_workspace_removes_its_store_but_not_layers_a_fork_needs(project, tmp_path):
    import gc
    origin = Workspace(project, store_dir=tmp_path)
    open(up(origin, "made"), "w").write("m")
    snap = origin.snapshot()
    fork = snap.fork(store_dir=tmp_path)
    origin_store, layer = origin.store, snap.layers[-1]
    del origin, snap
    gc.collect()
    assert os.path.isdir(layer)                          # the fork still stands on it
    assert [c.path for c in fork.changes()] == ["made"]
    fork_store = fork.store
    del fork
    gc.collect()
    assert not os.path.exists(fork_store) and not os.path.exists(origin_store)


def test_a_store_inside_the_project_is_refused(project, tmp_path):
    from pysandbox.errors import PolicyError
    with pytest.raises(PolicyError) as err:
        Workspace(project, store_dir=project / "d")
    assert err.value.reason == Reason.CONFLICTING_OPTIONS
    Workspace(project, store_dir=tmp_path).remove()       # control


def test_a_commit_killed_mid_way_leaves_old_or_new_and_the_documented_finish_works(ws, project):
    import signal
    for name in ("a", "b", "c"):
        open(up(ws, name), "w").write("new " + name)
    open(up(ws, "top"), "w").write("new top")
    ws.changes()
    pid = os.fork()
    if pid == 0:   # the committing process, SIGKILLed after its second entry
        try:
            real, done = workspace_commit._apply_one, []

            def dies(c, *args):
                if len(done) == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                done.append(c.path)
                return real(c, *args)
            workspace_commit._apply_one = dies
            ws.commit()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    for name in ("a", "b", "c", "top"):
        body = (project / name).read_text() if (project / name).exists() else None
        assert body in (None, "top\n") or body.startswith("new "), (name, body)
    left = [n for n in os.listdir(project) if n.startswith(".pysandbox-commit-")]
    assert len(left) == 1                                 # the staging directory of the killed commit
    assert [c.path for c in ws.changes()] == ["c", "top"]  # the finish: commit again ...
    ws.commit()
    import shutil
    shutil.rmtree(project / left[0])                      # ... and delete the staging directory
    assert {n: (project / n).read_text() for n in ("a", "b", "c", "top")} == \
        {"a": "new a", "b": "new b", "c": "new c", "top": "new top"}


# -- git metadata the command made (pysandbox/workspace_git.py): refused at commit, the
# paths named, nothing applied; each beside a control that commits (the honest files, and
# the same entries with allow_git=True)

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
