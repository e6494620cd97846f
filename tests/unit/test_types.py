"""mypy, as configured in pyproject.toml ([tool.mypy]), finds nothing in the modules its
``files`` list names: the typing ratchet of issue 26 item 6 (a module joins the list once
it is clean; the others are read for the types they export, their own errors not yet
reported). About 20-30 s on 2 busy cores; the cache lives in a tmp dir of this module's
tests, removed after."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import need

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"


def _mypy() -> list[str]:
    exe = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    if exe is None:
        need("mypy", "mypy is not installed (the test extra has it)")
    return [exe]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One mypy cache for the module's runs (pytest removes the tmp dir)."""
    path = tmp_path_factory.mktemp("mypy-cache")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_mypy(), "--config-file", str(CONFIG), "--cache-dir", str(cache), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_the_listed_modules_type_check_clean(cache):
    files = tomllib.loads(CONFIG.read_text())["tool"]["mypy"]["files"]
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"pyproject.toml [tool.mypy] files names modules that do not exist: {missing}"
    assert len(files) >= 81, "the ratchet only grows: a module leaves the list only when it is removed"
    done = _run(cache)
    assert done.returncode == 0 and f"no issues found in {len(files)} source files" in done.stdout, \
        done.stdout + done.stderr


def test_mypy_is_live(cache, tmp_path):
    """Control: the same configuration reports a record called with a wrong field type and
    an unknown field (pysandbox.records.dataclass is read as a dataclass), and a plain
    ill-typed assignment; the well-typed call beside them passes."""
    snippet = tmp_path / "ill_typed.py"
    snippet.write_text(
        "from pysandbox.fs import Bind\n"
        "ok = Bind('/usr', '/usr', readonly=True)\n"
        "bad = Bind('/usr', 5)\n"
        "worse = Bind('/usr', '/usr', readwrite=True)\n"
        "n: int = 'text'\n")
    done = _run(cache, str(snippet))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "ill_typed.py:3: error" in out and "ill_typed.py:4: error" in out and "ill_typed.py:5: error" in out, out
    assert "ill_typed.py:2:" not in out, out
