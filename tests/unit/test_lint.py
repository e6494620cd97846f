"""ruff, as configured in pyproject.toml ([tool.ruff]), finds nothing in the tree (the
house's habit, issue 26 item 6; mypy's ratchet: tests/unit/test_types.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import need

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        need("ruff", "ruff is not installed (the test extra has it)")
    return [exe]


def test_ruff_finds_nothing():
    done = subprocess.run([*_ruff(), "check", "--no-cache", str(ROOT)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_is_live(tmp_path):
    """Control: the same configuration finds an unused import in a file made here."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    done = subprocess.run([*_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and "F401" in done.stdout, done.stdout + done.stderr
