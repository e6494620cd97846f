"""docs/ARCHITECTURE.md stays true: every module of the product is in its map, every
path it names exists, every invariant cites a test (no escape: none is only planned), and every
cited test is a real test function."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
PATH = re.compile(r"`((?:pysandbox|bwrap_compat|native|tests|benchmarks|docs)/[\w/.-]*\.(?:py|c|h|md))`")


def _product_files():
    out = set()
    for pattern in ("pysandbox/**/*.py", "bwrap_compat/**/*.py", "native/*.c", "native/*.h", "native/*.py"):
        for p in ROOT.glob(pattern):
            rel = p.relative_to(ROOT).as_posix()
            # generated at build time (not tracked): the init blobs and the config header
            if p.name.startswith("_psb_") or rel.startswith("pysandbox/_native."):
                continue
            out.add(rel)
    return out


def _map_rows() -> set:
    section = DOC.read_text().split("## Module map", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", section, re.M)}


def test_every_product_module_is_in_the_map():
    rows = _map_rows()
    missing = sorted(_product_files() - rows)
    assert not missing, f"docs/ARCHITECTURE.md's module map lacks {missing}"
    gone = sorted(rows - _product_files())
    assert not gone, f"docs/ARCHITECTURE.md's module map lists what is not there: {gone}"


def test_every_named_path_exists():
    for path in PATH.findall(DOC.read_text()):
        assert (ROOT / path).exists(), path


def test_every_cited_test_exists():
    refs = REF.findall(DOC.read_text())
    assert len(refs) >= 20
    for path, name in refs:
        source = (ROOT / path).read_text()
        assert re.search(rf"^\s*(async )?def {name}\(", source, re.M), f"{path}::{name}"


def test_every_invariant_cites_a_test():
    section = DOC.read_text().split("## Invariants", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=\d+\. )", section)[1:]
    numbers = [int(item.split(".", 1)[0]) for item in items]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 13
    for item in items:
        assert REF.search(item), item[:80]


# A section cited by name: `docs/ARCHITECTURE.md, "The flow"`, `README "Profiles"`,
# `bwrap_compat/README.md ("Needs native support")`; the name may wrap onto the next line.
CITE = re.compile(r'((?:[\w./]+/)?(?:ARCHITECTURE|README))(?:\.md)?,?\s*\(?"([A-Za-z][^"()=\[\]{}]*)"', re.S)
CITING = ("pysandbox/**/*.py", "bwrap_compat/**/*.py", "native/*.[ch]", "tests/**/*.py", "benchmarks/**/*.py",
          "*.md", "docs/*.md", "bwrap_compat/*.md", "benchmarks/*.md", "tests/**/*.md")


def _sections(doc: Path) -> set[str]:
    """The names a citation may use: headings, and bold lead-ins (of a paragraph or of a
    list item), without their backticks."""
    text = doc.read_text().replace("`", "")
    names = {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", text, re.M)}
    names |= {m.group(1).strip() for m in re.finditer(r"^(?:\s*(?:\d+\.|-)\s+)?\*\*([^*]+)\*\*", text, re.M)}
    return names


def _doc_for(citing: str, name: str) -> Path:
    """The document a citation names: a path as written; a bare README is the top one,
    or bwrap_compat's own for pybwrap's code and tests."""
    if "/" in name:
        # from the top of the repository, else from the citing file's folder (../README)
        top = ROOT / f"{name}.md"
        return top if top.is_file() else ((ROOT / citing).parent / f"{name}.md").resolve()
    if name == "ARCHITECTURE":
        return DOC
    if citing.startswith(("bwrap_compat/", "tests/compat/")):
        return ROOT / "bwrap_compat" / "README.md"
    return ROOT / "README.md"


def _citations() -> list[tuple[str, Path, str]]:
    out = []
    for pattern in CITING:
        for path in ROOT.glob(pattern):
            rel = path.relative_to(ROOT).as_posix()
            if ".venv" in path.parts or not path.is_file() or rel == "tests/unit/test_architecture_doc.py":
                continue
            for m in CITE.finditer(path.read_text(errors="replace")):
                out.append((rel, _doc_for(rel, m.group(1)), " ".join(m.group(2).replace("`", "").split())))
    return out


def test_every_cited_section_exists():
    """A section cited by name in code, tests or docs is a heading (or a bold lead-in) of
    the document it names. Live control: a made-up name is not one."""
    assert "Network proxy mode" in _sections(DOC) and "No such section" not in _sections(DOC)
    cites = _citations()
    assert len(cites) >= 10, cites
    wrong = [(where, doc.relative_to(ROOT).as_posix(), name) for where, doc, name in cites
             if not doc.is_file() or not any(s == name or s.startswith(name) for s in _sections(doc))]
    assert not wrong, wrong
