"""Hostile paths and argument lists through real sandboxes, on both backends.

Paths with spaces, newlines, unicode and shell metacharacters work as workdir, ro
bind and hidden path (with live controls: the write that should succeed does, on the
host). ``..``, symlink loops and over-long paths give a typed error with a reason,
the command never runs, nothing is left behind. Arguments longer than
MAX_ARG_STRLEN (131072 bytes with the NUL) fail like subprocess (E2BIG) without
running the command; one byte less runs.
"""

from __future__ import annotations

import errno
import os

import pytest

import pysandbox
from pysandbox.errors import PolicyError, Reason, SandboxError
from tests.support import constrained
from tests.reliability import leaks

pytestmark = pytest.mark.requires("userns")
WEIRD = ["with space", "new\nline", "ünïcødé 日本", "quote'\"$HOME;*", "-leading-dash"]
MAX_ARG_STRLEN = 131072
WRITE = 'echo ran > "$1"'


def _cli(args, scratch):
    return constrained.run_cli("plain", args, scratch=scratch)


@pytest.mark.parametrize("name", WEIRD, ids=["space", "newline", "unicode", "shell-meta", "dash"])
def test_weird_names_work(backend, tmp_path, name):
    work = tmp_path / name / "work"
    ro = tmp_path / name / "ro"
    secret = tmp_path / name / "secret"
    for d in (work / "sub", ro, secret):
        d.mkdir(parents=True)
    (ro / "f").write_text("ro-data")
    (secret / "key").write_text("hidden-data")
    policy = pysandbox.Policy.default(workdir=str(work), ro=[str(ro)], hide=[str(secret)])
    script = ('cat "$2/f"; echo; echo ok > "$1/sub/out"; '
              '(echo x > "$2/f") 2>/dev/null && echo ro-writable; '
              'cat "$3/key" 2>/dev/null && echo secret-readable; pwd')
    with leaks.unchanged(policy=policy):
        done = pysandbox.run(["/bin/sh", "-c", script, "sh", str(work), str(ro), str(secret)],
                             policy=policy, backend=backend, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"ro-data\n{work}\n", done.stdout      # ro read, no write, hidden, cwd
    assert (work / "sub" / "out").read_text() == "ok\n"            # the live control
    assert (ro / "f").read_text() == "ro-data"


@pytest.mark.parametrize("name", WEIRD, ids=["space", "newline", "unicode", "shell-meta", "dash"])
def test_weird_names_on_the_cli(backend, tmp_path, name):
    work = tmp_path / name
    work.mkdir()
    marker = work / f"marker {name}"
    done = _cli(["run", "--backend", backend, "--workdir", str(work), "--", "/bin/sh", "-c", WRITE, "sh",
                 str(marker)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"


# A relative path is valid since issue 31 (the caller's directory's, pysandbox/relpath.py);
# a relative one with a '..' after a name is not.
@pytest.mark.parametrize("bad", ["/a/../b", "relative/../dir", "/x/" + "n" * 300, "/" + "/".join(["d" * 200] * 21)],
                         ids=["dotdot", "relative-dotdot", "long-component", "beyond-path-max"])
def test_bad_paths_refused_before_launch(backend, tmp_path, bad):
    marker = tmp_path / "marker"
    for kw in ("ro", "rw", "hide", "tmpfs"):
        with pytest.raises(PolicyError) as info:
            policy = pysandbox.Policy.default(workdir=str(tmp_path), **{kw: [bad]})
            pysandbox.run(["/bin/sh", "-c", WRITE, "sh", str(marker)], policy=policy, backend=backend)
        assert info.value.reason == Reason.INVALID_PATH, (kw, info.value)
    done = _cli(["run", "--backend", backend, "--workdir", str(tmp_path), "--ro", bad, "--",
                 "/bin/sh", "-c", WRITE, "sh", str(marker)], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert Reason.INVALID_PATH.value in done.stderr, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("use", ["ro", "workdir", "chdir-inside"])
def test_symlink_loop(backend, tmp_path, use):
    work = tmp_path / "work"
    work.mkdir()
    loop = tmp_path / "loop"
    os.symlink(loop, loop)              # loop -> loop: ELOOP on any resolution
    marker = work / "marker"
    argv = ["/bin/sh", "-c", WRITE, "sh", str(marker)]
    with leaks.unchanged(paths=[str(tmp_path), str(work)]):
        try:
            if use == "ro":
                policy = pysandbox.Policy.default(workdir=str(work), ro=[str(loop)])
            elif use == "workdir":
                policy = pysandbox.Policy.default(workdir=str(loop))
            else:
                policy = pysandbox.Policy.default(workdir=str(work), ro=[str(tmp_path)], chdir=str(loop))
            pysandbox.run(argv, policy=policy, backend=backend, timeout=60)
        except SandboxError as exc:
            assert isinstance(exc.reason, Reason), exc
        except OSError as exc:            # exec-like errors (chdir ELOOP), as subprocess gives
            assert exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR), exc
        else:
            pytest.fail(f"a launch with a symlink loop as {use} ran")
    assert not marker.exists(), "the command ran"


def test_deep_path_near_path_max(backend, tmp_path):
    """A workdir whose path is just under PATH_MAX: it works, or a typed error (no crash)."""
    base = str(tmp_path)
    parts = []
    while len(base) + sum(len(p) + 1 for p in parts) < 4000:
        parts.append("d" * min(200, 4000 - len(base) - sum(len(p) + 1 for p in parts) - 1 or 1))
    deep = os.path.join(base, *parts)
    os.makedirs(deep)
    assert 3900 < len(deep) < 4096
    marker = os.path.join(deep, "m")
    try:
        done = pysandbox.run(["/bin/sh", "-c", WRITE, "sh", marker], backend=backend, timeout=60,
                             policy=pysandbox.Policy.default(workdir=deep), capture_output=True)
    except SandboxError as exc:
        assert isinstance(exc.reason, Reason)
        assert not os.path.exists(marker)
    else:
        assert done.returncode == 0, done.stderr
        assert os.path.exists(marker)


def test_argument_beyond_max_arg_strlen(backend, tmp_path):
    marker = tmp_path / "marker"
    argv = ["/bin/sh", "-c", WRITE, "sh", str(marker)]
    policy = pysandbox.Policy.default(workdir=str(tmp_path))
    # control: the longest argument the kernel takes works
    done = pysandbox.run(argv + ["x" * (MAX_ARG_STRLEN - 1)], policy=policy, backend=backend, timeout=60)
    assert done.returncode == 0 and marker.exists()
    marker.unlink()
    for extra in (["x" * MAX_ARG_STRLEN], ["y" * 100_000] * 40):   # one too long; 4 MB in all
        with leaks.unchanged():
            with pytest.raises(OSError) as info:
                pysandbox.run(argv + extra, policy=policy, backend=backend, timeout=60)
        assert info.value.errno == errno.E2BIG, info.value
        assert not marker.exists()


def test_argument_beyond_max_arg_strlen_cli(backend, tmp_path):
    """Through the CLI (the argument itself must reach it: via a file and xargs-free exec)."""
    marker = tmp_path / "marker"
    code = ("import sys, runpy; sys.argv = ['pysandbox', 'run', '--backend', sys.argv[1], '--workdir', "
            "sys.argv[2], '--', '/bin/sh', '-c', 'echo ran > \"$1\"', 'sh', sys.argv[3], 'x' * 131072]; "
            "from pysandbox.cli import main; sys.exit(main(sys.argv[1:]))")
    done = constrained.run_python("plain", code, backend, str(tmp_path), str(marker), scratch=tmp_path)
    assert done.returncode in (125, 126), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not marker.exists()


def test_non_utf8_bytes_pass_through(backend):
    """Arguments and environment values that are not UTF-8 reach the command byte for byte."""
    raw = b"\xff\xfe caf\xc3\xa9 \n\t$HOME"
    env = {"X": os.fsdecode(raw), "PATH": "/usr/bin:/bin"}
    done = pysandbox.run([b"/bin/sh", b"-c", b'printf "%s|%s" "$1" "$X"', b"sh", raw], env=env,
                         backend=backend, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, raw + b"|" + raw), done.stderr


@pytest.mark.parametrize("argv", [[], [""], ["/bin/echo", "nul\x00byte"], [b"/bin/echo\x00x"]],
                         ids=["empty", "empty-name", "nul-arg", "nul-bytes"])
def test_invalid_command_is_policy_error(backend, argv, tmp_path):
    with pytest.raises(PolicyError):
        pysandbox.run(argv, backend=backend, policy=pysandbox.Policy.default(workdir=str(tmp_path)))
