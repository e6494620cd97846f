"""The simulated hosts of tests/support/constrained.py take away what they claim, and only that
(checked with util-linux and bwrap, without pysandbox), so that a pysandbox result
under them means what the reliability tests say it means."""

from __future__ import annotations

import pytest

from tests.support import constrained

pytestmark = pytest.mark.requires("userns")

CHECK = r"""
import subprocess, sys
def ok(argv):
    return subprocess.run(argv, capture_output=True).returncode == 0
bwrap = sys.argv[1]
print("userns", ok(["unshare", "-U", "true"]))
print("netns", ok(["unshare", "-U", "-r", "-n", "true"]))
print("proc", ok([bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "true"]))
try:
    import pysandbox._native
    print("native", True)
except ImportError:
    print("native", False)
"""

EXPECT = {
    "plain": {"userns": True, "netns": True, "proc": True, "native": True},
    "userns_disabled": {"userns": False, "netns": False, "proc": False, "native": True},
    "proc_unmountable": {"userns": True, "netns": True, "proc": False, "native": True},
    "netns_refused": {"userns": True, "netns": False, "proc": True, "native": True},
    "native_missing": {"userns": True, "netns": True, "proc": True, "native": False},
}


@pytest.mark.parametrize("host", sorted(EXPECT))
def test_simulation_takes_away_exactly_its_capability(host, tmp_path):
    done = constrained.run_python(host, CHECK, constrained.REAL_BWRAP, scratch=tmp_path)
    assert done.returncode == 0, done.stderr
    got = {k: v == "True" for k, v in (line.split() for line in done.stdout.splitlines())}
    assert got == EXPECT[host], done.stdout


@pytest.mark.parametrize("kind,missing", [("old", constrained.OLD_BWRAP_MISSING_OPTION)])
def test_fake_old_bwrap(kind, missing, tmp_path):
    import subprocess
    path = constrained.fake_bwrap(tmp_path, kind)
    helptext = subprocess.run([path, "--help"], capture_output=True, text=True).stdout
    assert "--ro-bind" in helptext and missing not in helptext
    refused = subprocess.run([path, missing, "--ro-bind", "/", "/", "true"], capture_output=True, text=True)
    works = subprocess.run([path, "--unshare-user", "--ro-bind", "/", "/", "true"], capture_output=True, text=True)
    assert refused.returncode != 0 and works.returncode == 0, (refused.stderr, works.stderr)


def test_fake_setuid_bwrap(tmp_path):
    import os
    import stat
    path = constrained.fake_bwrap(tmp_path, "setuid")
    assert os.stat(path).st_mode & stat.S_ISUID
