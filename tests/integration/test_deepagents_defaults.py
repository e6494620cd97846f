"""PysandboxSandbox's defaults an agent meets first (issue 31 item 4): ``glob`` with no
path searches the workdir, as ``grep`` does, not the host's whole read-only view; the
file operations run on a fixed interpreter the sandbox can see, not whichever ``python3``
is first on PATH, while the model's own commands keep PATH's. Each on both backends, each
with its live control."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

pytest.importorskip("deepagents")

from pysandbox.integrations import deepagents_python  # noqa: E402
from pysandbox.integrations.deepagents import PysandboxSandbox  # noqa: E402

FAKE_PYTHON = "#!/bin/sh\nexit 3\n"   # a python3 first on PATH that runs nothing


@pytest.fixture
def host_dir():
    """Outside the workdir, under /var/tmp: the default policy shows it read-only."""
    path = tempfile.mkdtemp(prefix="psb-da-defaults-", dir="/var/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("glob_paths", ["absolute", "relative"])
def test_glob_without_a_path_searches_the_workdir(backend, host_dir, glob_paths):
    with open(os.path.join(host_dir, "host-only.txt"), "w") as f:
        f.write("host\n")
    with PysandboxSandbox(backend=backend, glob_paths=glob_paths) as sb:
        sb.upload_files([(f"{sb.workdir}/mine.txt", b"x"), (f"{sb.workdir}/sub/deeper.txt", b"y")])
        got = sb.glob("**/*.txt")
        assert got.error is None, got.error
        paths = sorted(m["path"] for m in got.matches)
        if glob_paths == "absolute":
            assert paths == [f"{sb.workdir}/mine.txt", f"{sb.workdir}/sub/deeper.txt"]
        else:
            assert paths == ["mine.txt", "sub/deeper.txt"]
        got = asyncio.run(sb.aglob("*.txt"))   # deepagents: a pattern without '/' matches a basename anywhere
        assert sorted(os.path.basename(m["path"]) for m in got.matches) == ["deeper.txt", "mine.txt"]
        # control: the host file is there to find, where a path names it
        there = sb.glob("*.txt", host_dir)
        assert [os.path.basename(m["path"]) for m in there.matches] == ["host-only.txt"]
        assert sb.start_directory == sb.workdir


def test_file_operations_use_a_fixed_interpreter_not_paths_python3(backend, host_dir):
    bindir = os.path.join(host_dir, "bin")
    os.mkdir(bindir)
    fake = os.path.join(bindir, "python3")
    with open(fake, "w") as f:
        f.write(FAKE_PYTHON)
    os.chmod(fake, 0o755)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    with PysandboxSandbox(backend=backend, env=env, policy=None) as sb:
        assert os.path.isabs(sb.python) and os.path.basename(fake) != sb.python
        path = f"{sb.workdir}/notes.txt"
        assert sb.write(path, "alpha\nbeta\n").error is None
        assert "beta" in sb.read(path).file_data["content"]
        assert sb.edit(path, "beta", "gamma").error is None
        assert [m["path"] for m in sb.grep("gamma", sb.workdir).matches] == [path]
        assert [e["path"] for e in sb.ls(sb.workdir).entries] == [path]
        assert [m["path"] for m in sb.glob("*.txt").matches] == [path]
        assert asyncio.run(sb.aread(path)).file_data is not None
        # control: the model's own command gets PATH's python3 (the fake), as it asked for
        got = sb.execute("python3 -c 'print(1)'; echo code $?")
        assert got.output.strip().endswith("code 3"), got.output


def test_choose_falls_back_to_paths_python3_when_no_candidate_runs():
    class Done:
        def __init__(self, code):
            self.returncode = code
    tried = []
    assert deepagents_python.choose(lambda argv: tried.append(argv[0]) or Done(1)) == "python3"
    assert tried == deepagents_python.candidates()
    assert deepagents_python.choose(lambda argv: Done(0)) == deepagents_python.candidates()[0]
    assert deepagents_python.rewrite('python3 -c "x"', "/usr/bin/python3.11") == '/usr/bin/python3.11 -c "x"'
    assert deepagents_python.rewrite("ls; python3 -c x", "/p") == "ls; python3 -c x"   # only a leading one
