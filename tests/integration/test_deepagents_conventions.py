"""PysandboxSandbox's write and glob: Deep Agents' protocol by default (overwrite;
absolute paths of regular files), the langchain-tests conventions on request
(``overwrite=False``, ``glob_paths="relative"``, pysandbox/integrations/deepagents_conventions.py).
Each test runs on both backends (the ``backend`` fixture)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

pytest.importorskip("deepagents")

from pysandbox.integrations.deepagents import PysandboxSandbox  # noqa: E402

_TREE = ("mkdir -p r/src/app r/.hidden r/emptydir && echo 1 > r/top.py && echo 2 > r/src/app/main.py "
         "&& echo 3 > r/.hidden/h.py && echo 4 > r/.env && echo 5 > r/src/b.txt && echo 6 > r/a.yml")


def _paths(result):
    assert result.error is None, result.error
    return sorted((m["path"], m["is_dir"]) for m in result.matches)


def test_default_is_the_deep_agents_protocol(backend):
    with PysandboxSandbox(backend=backend) as sb:
        wd = sb.workdir
        assert sb.write(f"{wd}/f.txt", "one").error is None
        assert sb.write(f"{wd}/f.txt", "two").path == f"{wd}/f.txt"
        assert sb.execute("cat f.txt").output == "two"
        assert sb.execute(_TREE).exit_code == 0
        got = _paths(sb.glob("*.py", path=f"{wd}/r"))
        assert got == [(f"{wd}/r/.hidden/h.py", False), (f"{wd}/r/src/app/main.py", False),
                       (f"{wd}/r/top.py", False)]
        assert _paths(sb.glob("*", path=f"{wd}/r/src")) == [(f"{wd}/r/src/app/main.py", False),
                                                            (f"{wd}/r/src/b.txt", False)]


def test_create_only_write(backend):
    host = tempfile.mkdtemp(prefix="psb-da-conv-", dir="/var/tmp")
    try:
        os.chmod(host, 0o755)
        with PysandboxSandbox(backend=backend, overwrite=False) as sb:
            wd = sb.workdir
            assert sb.write(f"{wd}/new/deep/f.txt", "first").path == f"{wd}/new/deep/f.txt"
            again = sb.write(f"{wd}/new/deep/f.txt", "second")
            assert again.path is None and "already exists" in again.error
            assert sb.execute("cat new/deep/f.txt").output == "first"
            assert "is_directory" in sb.write(f"{wd}/new", "x").error
            # a symlink, even dangling, is something there: nothing is written through it
            assert sb.execute(f"ln -s {host}/planted dangling").exit_code == 0
            assert "already exists" in sb.write(f"{wd}/dangling", "x").error
            assert not os.path.lexists(f"{host}/planted")
            assert "invalid_path" in sb.write("relative.txt", "x").error
            assert "permission_denied" in sb.write("/etc/psb-da-conv", "x").error
            done = asyncio.run(sb.awrite(f"{wd}/async.txt", "a"))
            assert done.path == f"{wd}/async.txt"
            assert "already exists" in asyncio.run(sb.awrite(f"{wd}/async.txt", "b")).error
            assert sb.execute("cat async.txt").output == "a"
    finally:
        shutil.rmtree(host, ignore_errors=True)


def test_relative_glob_follows_the_deep_agents_matching_rules(backend):
    with PysandboxSandbox(backend=backend, glob_paths="relative") as sb:
        wd = sb.workdir
        assert sb.execute(_TREE + " && ln -s /etc r/src/out && ln -s top.py r/link.py").exit_code == 0
        root = f"{wd}/r"
        # no '/': the basename at any depth, hidden directories included, not hidden names
        assert _paths(sb.glob("*.py", path=root)) == [(".hidden/h.py", False), ("link.py", False),
                                                      ("src/app/main.py", False), ("top.py", False)]
        # '**' does not descend into a leading-dot directory; a leading '/' anchors
        assert _paths(sb.glob("**/*.py", path=root)) == [("link.py", False), ("src/app/main.py", False),
                                                         ("top.py", False)]
        assert _paths(sb.glob("/*.py", path=root)) == [("link.py", False), ("top.py", False)]
        assert _paths(sb.glob(".*", path=root)) == [(".env", False), (".hidden", True)]
        # directories are reported (is_dir); a symlink leading out of the root is not
        assert _paths(sb.glob("*", path=f"{root}/src")) == [("app", True), ("app/main.py", False),
                                                            ("b.txt", False)]
        assert _paths(sb.glob("*.{yml,txt}", path=root)) == [("a.yml", False), ("src/b.txt", False)]
        assert _paths(sb.glob("[^t]*.py", path=root)) == [(".hidden/h.py", False), ("link.py", False),
                                                          ("src/app/main.py", False)]
        assert _paths(sb.glob("*.nothing", path=root)) == []
        assert _paths(asyncio.run(sb.aglob("src/**", path=root))) == [("src/app", True),
                                                                      ("src/app/main.py", False),
                                                                      ("src/b.txt", False)]
        assert "invalid_pattern" in sb.glob("../*", path=root).error
        assert "path_not_found" in sb.glob("*", path=f"{wd}/missing").error
        assert "not_a_directory" in sb.glob("*", path=f"{root}/top.py").error
        assert sb.glob("*", path=f"{wd}/missing").matches is None


def test_bad_glob_paths_is_refused():
    with pytest.raises(ValueError):
        PysandboxSandbox(glob_paths="both")
