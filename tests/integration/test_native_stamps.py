"""Per-step timings of a native launch (pysandbox/backends/native/native_stamps.py, psb_launch
stamps in native/psb.h): with a listener every step of the child reports, in order;
without one no page is given to the C side at all."""

from __future__ import annotations

import logging

import pytest

import pysandbox
from pysandbox.backends.native import native_stamps

pytestmark = pytest.mark.requires("userns", "native")


def _launch(policy=None):
    got = []
    native_stamps.listeners.append(got.append)
    try:
        assert pysandbox.run(["true"], policy=policy, backend="native").returncode == 0
    finally:
        native_stamps.listeners.remove(got.append)
    return got


def test_every_step_of_a_launch_reports_in_order():
    (steps,) = _launch()
    labels = [label for label, _ in steps]
    assert labels[0] == "launcher: clone" and labels[-1] == "launcher: error pipe EOF", labels
    for point in ("launcher: clone returned", "setup process: entry", "command's process: execve"):
        assert point in labels, labels
    ops = [label.split()[1] for label in labels if label.startswith("op ")]
    assert [int(i) for i in ops] == sorted(int(i) for i in ops), labels   # each op once done, in order
    assert len(ops) >= 10 and any("PIVOT" in label for label in labels), labels
    assert all(dt >= 0 for _, dt in steps[1:]), steps


def test_without_a_listener_no_page_is_made(monkeypatch):
    made = []
    real = native_stamps.page
    monkeypatch.setattr(native_stamps, "page", lambda ffi, lib: made.append(1) or real(ffi, lib))
    logging.getLogger("pysandbox").setLevel(logging.WARNING)
    assert pysandbox.run(["true"], backend="native").returncode == 0
    assert made == []
    _launch()   # control: a listener makes one
    assert made == [1]


def test_the_debug_log_carries_the_steps(caplog):
    with caplog.at_level(logging.DEBUG, logger="pysandbox"):
        assert pysandbox.run(["true"], backend="native").returncode == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("native steps")]
    assert len(lines) == 1 and "op 0 " in lines[0] and "command's process: execve" in lines[0], lines
