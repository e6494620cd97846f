"""Paths that are not UTF-8 (Linux paths are bytes): the command line's workdir (given or
the current directory), --rw, --ro, --chdir, and the API's workdir and cwd=, on every
backend. Each check writes through the path and reads the result back from the host by
its bytes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import pysandbox

RAW = b"psb-\xff\xfe-caf\xe9"   # not UTF-8 (Latin-1 bytes)


@pytest.fixture
def raw_dir():
    """A host directory (outside the sandbox's private /tmp) whose name is not UTF-8, with
    a subdirectory of the same kind."""
    path = tempfile.mkdtemp(prefix=RAW + b"-", dir=b"/var/tmp")
    os.mkdir(os.path.join(path, b"sub-\xff"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def cli(backend, *args, cwd):
    return subprocess.run([sys.executable, "-m", "pysandbox", "run", "--backend", backend, *args],
                          cwd=cwd, capture_output=True, timeout=120)


def test_cli_current_directory_as_the_default_workdir(backend, raw_dir):
    done = cli(backend, "--", "sh", "-c", "pwd; echo x > made", cwd=raw_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout == raw_dir + b"\n"
    assert os.path.exists(os.path.join(raw_dir, b"made"))


def test_cli_workdir_chdir_rw_and_ro(backend, raw_dir):
    sub = os.path.join(raw_dir, b"sub-\xff")
    done = cli(backend, "--workdir", raw_dir, "--chdir", sub, "--", "sh", "-c", "pwd; echo x > here",
               cwd="/")
    assert (done.returncode, done.stdout) == (0, sub + b"\n"), done.stderr
    assert os.path.exists(os.path.join(sub, b"here"))
    done = cli(backend, "--no-workdir", "--rw", sub, "--", "sh", "-c", 'echo x > "$1/rw"', "sh", sub, cwd="/")
    assert done.returncode == 0, done.stderr
    assert os.path.exists(os.path.join(sub, b"rw"))
    # --ro: readable, not writable (live control above: the same path --rw is writable)
    done = cli(backend, "--no-workdir", "--ro", sub, "--", "sh", "-c", 'cat "$1/rw" && ! echo y > "$1/ro"',
               "sh", sub, cwd="/")
    assert (done.returncode, done.stdout) == (0, b"x\n"), done.stderr
    assert not os.path.exists(os.path.join(sub, b"ro"))


def test_cli_hide_and_tmpfs(backend, raw_dir):
    sub = os.path.join(raw_dir, b"sub-\xff")
    with open(os.path.join(sub, b"secret"), "w") as f:
        f.write("s")
    # control first: without --hide the file is readable
    done = cli(backend, "--workdir", raw_dir, "--", "cat", os.path.join(sub, b"secret"), cwd="/")
    assert (done.returncode, done.stdout) == (0, b"s"), done.stderr
    done = cli(backend, "--workdir", raw_dir, "--hide", sub, "--", "cat", os.path.join(sub, b"secret"), cwd="/")
    assert done.returncode != 0 and done.stdout == b"", done.stderr
    done = cli(backend, "--workdir", raw_dir, "--tmpfs", sub, "--", "sh", "-c", 'ls -A "$1"; echo t > "$1/t"',
               "sh", sub, cwd="/")
    assert (done.returncode, done.stdout) == (0, b""), done.stderr   # empty tmpfs, writable
    assert not os.path.exists(os.path.join(sub, b"t"))               # not the host directory


def test_cli_missing_non_utf8_chdir_is_not_a_traceback(backend, raw_dir):
    done = cli(backend, "--workdir", raw_dir, "--chdir", os.path.join(raw_dir, b"missing-\xff"), "--", "true",
               cwd="/")
    assert done.returncode in (2, 125) and b"Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_refused_non_utf8_path_is_echoed_by_its_bytes(backend, raw_dir):
    """pysandbox's own message names a refused path by its bytes, as the shell and bwrap
    echo it, never by Python's escapes (issue 31 item 5). Control: a path with a control
    character stays escaped, so the one-line message stays one line."""
    bad = os.path.join(raw_dir, b"sub-\xff", b"..", b"x")
    done = cli(backend, "--workdir", raw_dir, "--ro", bad, "--", "true", cwd="/")
    assert done.returncode == 2 and b"\\udc" not in done.stderr, done.stderr
    assert done.stderr.count(bad) == 2, done.stderr   # the flag's echo and the quoted path
    newline = os.path.join(raw_dir, b"a\nb", b"..", b"x")
    done = cli(backend, "--workdir", raw_dir, "--ro", newline, "--", "true", cwd="/")
    assert done.returncode == 2 and b"a\\nb" in done.stderr, done.stderr


def test_api_workdir_and_cwd_as_bytes(backend, raw_dir):
    policy = pysandbox.Policy.default(workdir=raw_dir)
    out = pysandbox.check_output(["sh", "-c", "pwd; echo x > api"], policy=policy, backend=backend,
                                 cwd=b"sub-\xff", timeout=120)
    assert out == os.path.join(raw_dir, b"sub-\xff") + b"\n"
    assert os.path.exists(os.path.join(raw_dir, b"sub-\xff", b"api"))


@pytest.mark.requires("bwrap", "native")
def test_pybwrap_takes_them_as_bwrap_does(raw_dir):
    """The same bwrap command line, non-UTF-8 bind and chdir, through bwrap and pybwrap."""
    sub = os.path.join(raw_dir, b"sub-\xff")
    bwrap = shutil.which("bwrap")
    pybwrap = [sys.executable, "-c", "import sys; from bwrap_compat.cli import main; sys.exit(main())"]
    outs = []
    for tool, tag in (([bwrap], b"bwrap"), (pybwrap, b"pybwrap")):
        done = subprocess.run([*tool, "--unshare-user", "--ro-bind", "/", "/", "--bind", sub, sub, "--chdir", sub,
                               "--", "sh", "-c", 'pwd; echo x > "$1"', "sh", tag],
                              capture_output=True, timeout=120)
        assert done.returncode == 0, (tag, done.stderr)
        assert os.path.exists(os.path.join(sub, tag))
        outs.append(done.stdout)
    assert outs[0] == outs[1] == sub + b"\n"


@pytest.mark.requires("bwrap", "native")
def test_pybwrap_error_names_the_path_by_its_bytes(raw_dir):
    """A missing non-UTF-8 source: pybwrap's message carries the path's own bytes, as
    bwrap's does (not Python's ``\\udcff`` escapes)."""
    missing = os.path.join(raw_dir, b"gone-\xff")
    bwrap = shutil.which("bwrap")
    pybwrap = [sys.executable, "-c", "import sys; from bwrap_compat.cli import main; sys.exit(main())"]
    errs = []
    for tool in ([bwrap], pybwrap):
        done = subprocess.run([*tool, "--ro-bind", missing, "/x", "true"], capture_output=True, timeout=120)
        assert done.returncode == 1, done.stderr
        errs.append(done.stderr)
    assert missing in errs[0]                 # the control: bwrap prints the raw bytes
    assert errs[1] == errs[0]
