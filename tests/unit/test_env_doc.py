"""Every environment switch the product reads is documented in README.md's
"Environment variables" table (none undocumented, none stale)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"PYSANDBOX_[A-Z0-9_]+")


def _product_names() -> set:
    names = set()
    for pattern in ("pysandbox/**/*.py", "bwrap_compat/**/*.py", "native/*.c", "native/*.h", "native/*.py",
                    "setup.py"):
        for path in ROOT.glob(pattern):
            names |= set(NAME.findall(path.read_text(errors="replace")))
    return names


def _table() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Environment variables", 1)[1].split("\n## ", 1)[0]


def test_every_switch_is_documented():
    names = _product_names()
    assert "PYSANDBOX_NATIVE_NO_EXEC_INIT" in names and "PYSANDBOX_BWRAP" in names   # the scan sees them
    table = _table()
    missing = sorted(n for n in names if f"`{n}" not in table)
    assert not missing, f"README.md 'Environment variables' lacks {missing}"


def test_no_stale_library_entry():
    rows = set(re.findall(r"^\| `(PYSANDBOX_[A-Z0-9_]+)", _table(), re.M))
    assert rows and rows <= _product_names(), sorted(rows - _product_names())
