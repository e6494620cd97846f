"""PysandboxSandbox (pysandbox/integrations/deepagents.py) beyond the standard suite:
construction and teardown, timeouts, exit codes, the error literals, and transfers that
cannot be turned against the host by a symlink the sandbox planted. Each test runs on
both backends (the ``backend`` fixture)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

pytest.importorskip("deepagents")

from pysandbox.errors import Reason, SessionError  # noqa: E402
from pysandbox.integrations.deepagents import TIMEOUT_EXIT_CODE, PysandboxSandbox  # noqa: E402


@pytest.fixture
def host_dir():
    """A host directory outside every sandbox's writable area (under /var/tmp, which the
    default policy shows read-only)."""
    path = tempfile.mkdtemp(prefix="psb-da-host-", dir="/var/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_argument_construction_and_teardown(backend):
    with PysandboxSandbox(backend=backend) as sb, PysandboxSandbox(backend=backend) as other:
        assert sb.id != other.id and sb.id
        workdir = sb.workdir
        assert os.path.isdir(workdir) and workdir != other.workdir
        got = sb.execute("pwd; echo out; echo err >&2")
        assert got.exit_code == 0 and not got.truncated
        assert got.output == f"{workdir}\nout\nerr\n"
        # the workdir is the host directory: a file written in the sandbox is there
        assert sb.execute("echo hi > made.txt").exit_code == 0
        with open(os.path.join(workdir, "made.txt")) as f:
            assert f.read() == "hi\n"
        assert sb.session.backend_name == backend and sb.id == sb.session.id
    assert not os.path.exists(workdir) and sb.session.closed
    sb.close()
    sb.delete()   # idempotent, both
    with pytest.raises(SessionError) as err:
        sb.execute("true")
    assert err.value.reason == Reason.SESSION_CLOSED


def test_workdir_removed_though_the_sandbox_locked_it(backend):
    sb = PysandboxSandbox(backend=backend)
    workdir = sb.workdir
    got = sb.execute("mkdir -p locked/deeper && echo x > locked/deeper/f && chmod 000 locked/deeper locked")
    assert got.exit_code == 0, got.output
    sb.delete()
    assert not os.path.exists(workdir)
    sb.delete()


def test_teardown_never_follows_a_planted_symlink(backend, host_dir):
    target = os.path.join(host_dir, "keep")
    os.mkdir(target, 0o755)
    with open(os.path.join(target, "f"), "w") as f:
        f.write("kept")
    with PysandboxSandbox(backend=backend) as sb:
        got = sb.execute(f"ln -s {target} dirlink && ln -s {target}/f filelink && ls -l dirlink filelink")
        assert got.exit_code == 0, got.output
        workdir = sb.workdir
    assert not os.path.exists(workdir)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755
    with open(os.path.join(target, "f")) as f:
        assert f.read() == "kept"


@pytest.mark.parametrize("where", ["visible", "hidden"])
def test_upload_through_a_planted_symlink_leaves_the_host_file(backend, host_dir, where):
    # "visible": the host file is in the sandbox's view, read-only; "hidden": under the
    # host's /tmp, which the sandbox's private /tmp hides.
    base = host_dir if where == "visible" else tempfile.mkdtemp(prefix="psb-da-hidden-")
    try:
        secret = os.path.join(base, "passwd")
        with open(secret, "w") as f:
            f.write("root:x:0:0\n")
        with PysandboxSandbox(backend=backend) as sb:
            link = os.path.join(sb.workdir, "link")
            assert sb.execute(f"ln -s {secret} {link}").exit_code == 0
            assert os.path.islink(link)   # the host sees the symlink in the workdir
            [got] = sb.upload_files([(link, b"owned\n")])
            assert got.path == link and got.error in ("permission_denied", "file_not_found")
            # live control: the same upload to a plain file of the workdir lands on the host
            plain = os.path.join(sb.workdir, "plain")
            assert sb.upload_files([(plain, b"fine\n")])[0].error is None
            with open(plain, "rb") as f:
                assert f.read() == b"fine\n"
        with open(secret) as f:
            assert f.read() == "root:x:0:0\n"
    finally:
        if base != host_dir:
            shutil.rmtree(base, ignore_errors=True)


def test_timeout_ends_the_command_and_the_sandbox_goes_on(backend):
    with PysandboxSandbox(backend=backend) as sb:
        got = sb.execute("echo started; sleep 60 & wait", timeout=1)
        assert got.exit_code == TIMEOUT_EXIT_CODE
        assert "timed out after 1 seconds" in got.output
        assert got.output.startswith("started\n")   # the output so far is kept
        after = sb.execute("echo still here")
        assert (after.exit_code, after.output) == (0, "still here\n")


def test_default_timeout_applies(backend):
    with PysandboxSandbox(backend=backend, default_timeout=1) as sb:
        assert sb.execute("sleep 60").exit_code == TIMEOUT_EXIT_CODE


def test_exit_codes_and_undecodable_output(backend):
    with PysandboxSandbox(backend=backend) as sb:
        assert sb.execute("exit 7").exit_code == 7
        assert sb.execute("kill -9 $$").exit_code == 137
        got = sb.execute(r"printf 'a\377b'")
        assert got.output == "a\ufffdb"
        assert sb.execute("cat").output == ""   # stdin is empty, nothing waits on it


def test_transfer_errors_map_to_the_deep_agents_literals(backend):
    with PysandboxSandbox(backend=backend) as sb:
        wd = sb.workdir
        assert sb.execute("mkdir d && echo s > noread && chmod 000 noread && echo f > file").exit_code == 0
        ups = sb.upload_files([("relative.txt", b""), (f"{wd}/d", b""), ("/etc/hostname", b"x"),
                               (f"{wd}/file/below", b"x"), (f"{wd}/new/deep/er.txt", b"ok")])
        assert [u.error for u in ups] == ["invalid_path", "is_directory", "permission_denied",
                                          "invalid_path", None]
        downs = sb.download_files(["rel", f"{wd}/d", f"{wd}/missing", f"{wd}/new/deep/er.txt"])
        assert [(d.error, d.content) for d in downs] == [
            ("invalid_path", None), ("is_directory", None), ("file_not_found", None), (None, b"ok")]
        if os.geteuid() != 0 or sb.execute("cat noread").exit_code != 0:
            [d] = sb.download_files([f"{wd}/noread"])
            assert d.error == "permission_denied"


def test_relative_paths_run_nothing(backend, monkeypatch):
    with PysandboxSandbox(backend=backend) as sb:
        def refuse(*args, **kwargs):
            raise AssertionError("a command ran")
        monkeypatch.setattr(sb.session, "run", refuse)
        assert sb.upload_files([("a/b", b"")])[0].error == "invalid_path"
        assert sb.download_files(["a/b", "x\x00y"])[1].error == "invalid_path"


def test_large_and_binary_roundtrip(backend):
    payload = bytes(range(256)) * (40 * 1024) + b"\x00tail"   # 10 MiB and a bit
    with PysandboxSandbox(backend=backend) as sb:
        path = "/tmp/big/payload.bin"
        assert sb.upload_files([(path, payload)])[0].error is None
        assert sb.execute(f"wc -c < {path}").output.strip() == str(len(payload))
        [got] = sb.download_files([path])
        assert got.error is None and got.content == payload
        assert sb.upload_files([("/tmp/empty", b"")])[0].error is None
        assert sb.download_files(["/tmp/empty"])[0].content == b""


def test_delete_with_a_path_deletes_a_file(backend):
    with PysandboxSandbox(backend=backend) as sb:
        sb.upload_files([("/tmp/gone/f", b"x")])
        assert sb.delete("/tmp/gone").error is None
        assert sb.execute("test -e /tmp/gone").exit_code == 1
        assert sb.execute("echo alive").output == "alive\n"


def test_given_policy_keeps_its_workdir(backend, tmp_path):
    import pysandbox
    wd = tmp_path / "project"
    wd.mkdir()
    policy = pysandbox.Policy.default(workdir=str(wd))
    with PysandboxSandbox(policy=policy, backend=backend) as sb:
        assert sb.workdir is None
        assert sb.execute("echo x > f && pwd").output == f"{wd}\n"
    assert (wd / "f").read_text() == "x\n"


def test_credential_stores_cannot_be_downloaded(backend, host_dir, monkeypatch):
    """The backend's default policy hides the caller's credential stores (a fake $HOME's
    ~/.ssh) and, for a root caller, /etc/shadow: the downloads fail. Control: the same
    downloads under the opt-out policy return the files."""
    import hashlib

    import pysandbox
    home = tempfile.mkdtemp(prefix="psb-da-home-", dir="/var/tmp")
    try:
        os.chmod(home, 0o755)
        os.mkdir(os.path.join(home, ".ssh"))
        key = os.path.join(home, ".ssh", "id_ed25519")
        with open(key, "w") as f:
            f.write("SECRET-key")
        monkeypatch.setenv("HOME", home)
        root = os.geteuid() == 0
        paths = [key, "/etc/shadow"] if root else [key]
        with PysandboxSandbox(backend=backend) as sb:
            downs = sb.download_files(paths)
        for path, got in zip(paths, downs):
            assert got.content is None and got.error in ("permission_denied", "file_not_found"), (path, got)
        policy = pysandbox.Policy.default(workdir=host_dir, hide_credentials=False)
        with PysandboxSandbox(policy=policy, backend=backend) as sb:
            downs = sb.download_files(paths)
        assert downs[0].error is None and downs[0].content == b"SECRET-key"
        if root:   # compared by digest: the host's hashes are never printed
            with open("/etc/shadow", "rb") as f:
                assert hashlib.sha256(downs[1].content or b"").hexdigest() == hashlib.sha256(f.read()).hexdigest()
    finally:
        shutil.rmtree(home, ignore_errors=True)
