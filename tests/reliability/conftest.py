"""Every reliability test gets a private TMPDIR, so that the temporary-file leak check
(tests/reliability/leaks.py) sees only what this test's launches leave behind, not
what other users of the shared /tmp do meanwhile."""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    path = tmp_path / "tmpdir"
    path.mkdir()
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path
