"""A build without a compiler fails with one line and leaves no module an earlier build
left (issue 26 item 3, issue 31 item 6): the native module is required, so setup.py's
build_ext ends the build with :data:`NO_COMPILER`; before that it removes the
``build/lib.../pysandbox/_native.abi3.so`` that ``pip wheel`` left (an install that kept
it would load a stale module). Runs setup.py's build_ext with ``CC=/bin/false``; the live
control plants a file beside the stale one (not where build_ext writes), which stays, and
the compiler that works (the test's own) builds the same extension."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

from tests.support import need, not_applicable


ROOT = pathlib.Path(__file__).resolve().parents[2]


# setup.py's build_ext class on one extension named as the real one (abi3, as cffi makes
# it), without setup() (the venv's setuptools may predate the pyproject's metadata keys)
BUILD = """
import sys, setuptools
setuptools.setup = lambda **kw: None
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"))
from setuptools import Distribution, Extension
ext = Extension("pysandbox._native", [sys.argv[3]], py_limited_api=True)
dist = Distribution({"ext_modules": [ext], "cmdclass": {"build_ext": RequiredBuildExt}})
cmd = dist.get_command_obj("build_ext")
cmd.build_lib, cmd.build_temp = sys.argv[2], sys.argv[2] + ".tmp"
cmd.inplace = len(sys.argv) > 4   # as an editable install builds
cmd.ensure_finalized()
print(cmd.get_ext_fullpath(ext.name))
cmd.run()
"""


def test_a_failed_build_removes_the_module_an_earlier_build_left(tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        # a venv of Python 3.12+ has none; a source install builds in pip's own isolated
        # environment (pyproject.toml's build-system), which this test cannot drive
        not_applicable("no setuptools in this environment to drive setup.py's build_ext")
    (tmp_path / "x.c").write_text("int x;\n")
    env = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    build_lib = tmp_path / "build" / "lib-earlier"   # where `pip wheel` built (named here, not guessed)
    stale = build_lib / "pysandbox" / "_native.abi3.so"
    control = build_lib / "pysandbox" / "_native.abi3.so.keep"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\x7fELF stale")
    control.write_bytes(b"\x7fELF not the module")
    os.utime(stale, (0, 0))   # older than its source (cffi writes the C source anew on each build)
    done = subprocess.run([sys.executable, "-c", BUILD, str(ROOT / "setup.py"), str(build_lib),
                           str(tmp_path / "x.c")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stdout.strip() == str(stale)          # the file the build writes is the one planted
    ours = [line for line in done.stderr.splitlines() if line.startswith("error: pysandbox: ")]
    assert len(ours) == 1 and "could not be compiled" in ours[0] and "wheel" in ours[0], done.stderr[-3000:]
    assert not stale.exists(), "the stale module would be installed"
    assert f"removed {stale}" in done.stderr
    assert control.exists()


def test_control_a_build_with_a_compiler_succeeds(tmp_path):
    """Control: the same build_ext with the environment's compiler builds the module."""
    if importlib.util.find_spec("setuptools") is None:
        not_applicable("no setuptools in this environment to drive setup.py's build_ext")
    if shutil.which("cc") is None:
        need("cc", "no C compiler here")
    (tmp_path / "x.c").write_text("int x;\n")
    build_lib = tmp_path / "build" / "lib"
    done = subprocess.run([sys.executable, "-c", BUILD, str(ROOT / "setup.py"), str(build_lib),
                           str(tmp_path / "x.c")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert pathlib.Path(done.stdout.strip()).is_file()


def test_a_failed_editable_build_removes_the_module_left_in_the_tree(tmp_path):
    """The same for an in-place build (``pip install -e``): setuptools clears ``inplace``
    while it builds, and the module an earlier build left in the source tree (here: the
    tree is the test's cwd) must still go; the control file beside it stays."""
    if importlib.util.find_spec("setuptools") is None:
        not_applicable("no setuptools in this environment to drive setup.py's build_ext")
    (tmp_path / "x.c").write_text("int x;\n")
    (tmp_path / "pysandbox").mkdir()
    stale = tmp_path / "pysandbox" / "_native.abi3.so"
    control = tmp_path / "pysandbox" / "_native.abi3.so.keep"
    stale.write_bytes(b"\x7fELF stale")
    control.write_bytes(b"\x7fELF not the module")
    env = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    done = subprocess.run([sys.executable, "-c", BUILD, str(ROOT / "setup.py"), str(tmp_path / "build" / "lib"),
                           str(tmp_path / "x.c"), "inplace"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "error: pysandbox: " in done.stderr, done.stderr[-3000:]
    assert not stale.exists(), "the stale module would be loaded by the editable install"
    assert control.exists()
