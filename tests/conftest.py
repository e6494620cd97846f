"""Shared fixtures: the ``requires`` marker, PYSANDBOX_MUST_WORK, the ``backend`` fixture."""

from __future__ import annotations

import pytest

from tests.support import MUST_WORK, NEEDS_PREFIX, host_capability, need

BACKENDS = ("native", "bwrap")


def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="requires"):
        for cap in mark.args:
            why = host_capability(cap)
            if why is not None:
                need(cap, why)


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each backend in turn; skipped with the reason where it cannot run here."""
    why = host_capability(request.param)
    if why is not None:
        need(request.param, why)
    return request.param


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # A capability skip raised by some other path (e.g. pytest.skip in a helper
    # written before need() existed) still counts as a failure in CI.
    if MUST_WORK and report.skipped and call.excinfo is not None:
        msg = str(getattr(call.excinfo.value, "msg", ""))
        if msg.startswith(NEEDS_PREFIX):
            report.outcome = "failed"
            report.longrepr = f"PYSANDBOX_MUST_WORK=1 and {msg}"
