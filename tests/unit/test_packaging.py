"""Packaging facts checked without building: the version has one copy, the wheel is tagged
for the stable ABI from the oldest supported Python, the license and py.typed ship. Building and installing (abi3 manylinux wheel without a
compiler, source install without one) is CI's packaging stage: .ci/packaging."""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

import pytest

import pysandbox
from pysandbox import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def setup_py() -> ast.Module:
    return ast.parse((ROOT / "setup.py").read_text())


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"pysandbox {pysandbox.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", pysandbox.__version__)


def test_version_has_one_copy_pysandbox_version():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pysandbox.__version__"}


def test_changelog_names_the_current_version():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(pysandbox.__version__)}\b", changelog, re.M), changelog[:200]


def test_license_file_is_the_declared_mit_license():
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def test_py_typed_is_package_data():
    assert (ROOT / "pysandbox" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["pysandbox"]


def test_classifiers_name_every_python_from_requires_python():
    project = PYPROJECT["project"]
    oldest = re.fullmatch(r">=3\.(\d+)", project["requires-python"]).group(1)
    versions = {int(m) for c in project["classifiers"]
                for m in re.findall(r"^Programming Language :: Python :: 3\.(\d+)$", c)}
    assert min(versions) == int(oldest) and versions == set(range(int(oldest), max(versions) + 1))
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]
    assert "Typing :: Typed" in project["classifiers"]


def test_wheel_is_tagged_abi3_from_the_oldest_supported_python():
    oldest = re.fullmatch(r">=3\.(\d+)", PYPROJECT["project"]["requires-python"]).group(1)
    options = [kw.value for node in ast.walk(setup_py()) if isinstance(node, ast.Call)
               for kw in node.keywords if kw.arg == "options"]
    assert len(options) == 1
    assert ast.literal_eval(options[0]) == {"bdist_wheel": {"py_limited_api": f"cp3{oldest}"}}

