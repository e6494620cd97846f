"""Fixtures for the pytest-benchmark suites (run: pytest benchmarks/ --benchmark-only).

A contender that cannot run here is skipped with the reason; under
PYSANDBOX_MUST_WORK=1 that skip is a failure, as in tests/.
"""

from __future__ import annotations

import os

import pytest

import contenders as C

MUST_WORK = os.environ.get("PYSANDBOX_MUST_WORK") == "1"
BIND_COUNTS = (0, 10, 100, 400, 1000)


def unavailable(why: str) -> None:
    if MUST_WORK:
        pytest.fail(f"PYSANDBOX_MUST_WORK=1 and {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def bind_dirs():
    """Up to 1,000 empty host directories for read-only binds; removed after the session."""
    with C.BindDirs(max(BIND_COUNTS)) as dirs:
        yield dirs


@pytest.fixture
def make_contender():
    """``make_contender(name, network, binds)``: a launcher proven to work, else skip."""
    def make(name: str, network: str = "deny", binds=()):
        try:
            return C.make(name, network, list(binds))
        except C.Unavailable as exc:
            unavailable(str(exc))
    return make
