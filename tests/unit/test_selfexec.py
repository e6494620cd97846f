"""pybwrap's /proc/self/exe (bwrap_compat/selfexec.py): which command names the magic
link in the sandbox, and the command that replaces it. No kernel needed; the nested
sandboxes against /usr/bin/bwrap are tests/compat/test_selfexec.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bwrap_compat import selfexec
from pysandbox import plan as P
from tests.unit.test_bwrap_compat import _policy


def _ops(argv):
    policy, _ = _policy(argv + ["c"])
    return P.compile(policy).mount_ops


ROOT = ["--ro-bind", "/", "/"]


@pytest.mark.parametrize("argv", [ROOT, ROOT + ["--proc", "/proc"], ROOT + ["--unshare-pid", "--proc", "/proc"],
                                  ["--ro-bind", "/usr", "/usr", "--unshare-pid", "--proc", "/proc"],
                                  ["--ro-bind", "/proc", "/proc"]],
                         ids=["host-root", "host-proc", "new-proc", "new-proc-only", "proc-bind"])
def test_a_procfs_self_exe_is_the_link(argv):
    assert selfexec.names_self("/proc/self/exe", "/", _ops(argv))


@pytest.mark.parametrize("name,cwd", [("/proc/thread-self/exe", "/"), ("//proc/./self/../self/exe", "/"),
                                      ("self/exe", "/proc"), ("./exe", "/proc/self"), ("../proc/self/exe", "/usr")])
def test_other_spellings(name, cwd):
    assert selfexec.names_self(name, cwd, _ops(ROOT + ["--unshare-pid", "--proc", "/proc"]))


def test_a_procfs_elsewhere():
    ops = _ops(ROOT + ["--tmpfs", "/tmp", "--unshare-pid", "--proc", "/tmp/newproc"])
    assert selfexec.names_self("/tmp/newproc/self/exe", "/", ops)


@pytest.mark.parametrize("name,argv", [
    ("/proc/self/exe", ROOT + ["--tmpfs", "/proc"]),         # no procfs there: ENOENT, as bwrap
    ("/proc/self/exe", ["--ro-bind", "/usr", "/usr"]),        # no /proc at all
    ("exe", ROOT),                                           # a PATH search
    ("/proc/self/exe2", ROOT), ("/proc/1/exe", ROOT), ("/tmp/self/exe", ROOT + ["--tmpfs", "/tmp"]),
    ("/usr/bin/python3", ROOT),
])
def test_not_the_link(name, argv):
    assert not selfexec.names_self(name, "/", _ops(argv))


def test_rewrite_keeps_the_arguments_and_argv0():
    cmd = ["/proc/self/exe", "--ro-bind", "/", "/", "sh", "-c", "echo 'a b' \"$x\"", ""]
    out = selfexec.rewrite(cmd, None)
    assert out[0] == sys.executable and "-c" in out
    at = out.index("-c")
    assert out[at + 2:] == cmd                                # argv[0] = the command as written
    assert selfexec.rewrite(cmd, "mybwrap")[at + 2:] == ["mybwrap"] + cmd[1:]


def test_rewritten_command_runs_pybwrap_with_that_argv0():
    """The rewritten words, run directly (no sandbox): pybwrap's --version, and its usage
    line naming the argv[0] given."""
    words = selfexec.rewrite(["/proc/self/exe", "--version"], None)
    out = subprocess.run(words, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.split("\n")[0].split()[0]) == (0, "bubblewrap")
    words = selfexec.rewrite(["/proc/self/exe"], "mybwrap")
    out = subprocess.run(words, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.startswith("usage: mybwrap ")
