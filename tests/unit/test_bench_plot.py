"""``benchmarks/run.py --plot FILE.png`` (issue 31 item 7; benchmarks/plot.py): the PNG is
written and holds the named series (its ``Series`` metadata, read back from the file).
run.py's wiring is driven with stand-in sections (no launch measured: timing claims are
the benchmarks' own)."""

from __future__ import annotations

import importlib
import pathlib
import sys

import pytest

pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the plot extra: pip install 'pysandbox[plot]')")

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
LAUNCH = ["plain spawn", "native", "bwrap backend", "raw bwrap", "session", "pool"]
MOUNTS = ["mounts: floor", "mounts: native", "mounts: bwrap backend", "mounts: raw bwrap"]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("plot", "run"):
        sys.modules.pop(name, None)
    return importlib.import_module("plot")


def _samples():
    return {"launch": {"plain/allow": [0.001, 0.0012, 0.0011], "native/deny": [0.004, 0.005, 0.0045],
                       "bwrap-backend/deny": [0.02, 0.021], "bwrap/deny": [0.012, 0.013, 0.011],
                       "native/allow": [0.003]},
            "session": {"session native": [0.0015, 0.0016], "plain": [0.001]},
            "pool": {"pool native": [0.002, 0.0025], "plain": [0.001]}}


MOUNT_MEDIANS = {f"{name}/{count}": 0.001 * (1 + count / 100) for name in ("floor", "native", "bwrap-backend", "bwrap")
                 for count in (0, 10, 100)}


def _series_of(path) -> list[str]:
    from PIL import Image   # matplotlib's own dependency
    with Image.open(path) as img:
        assert img.format == "PNG" and img.size[0] > 400
        return img.info["Series"].split("; ")


def test_the_plot_is_written_with_the_named_series(bench, tmp_path):
    out = tmp_path / "launch.png"
    drawn = bench.draw(_samples(), MOUNT_MEDIANS, str(out), title="test")
    assert drawn == LAUNCH + MOUNTS
    assert _series_of(out) == drawn


def test_a_missing_section_leaves_its_series_out(bench, tmp_path):
    out = tmp_path / "partial.png"
    samples = _samples()
    del samples["pool"]
    assert bench.draw(samples, {}, str(out)) == [n for n in LAUNCH if n != "pool"]
    assert _series_of(out) == [n for n in LAUNCH if n != "pool"]
    with pytest.raises(ValueError):
        bench.draw({}, {}, str(tmp_path / "empty.png"))   # nothing to draw is said, not drawn blank


def test_run_py_writes_the_plot_of_its_sections(bench, tmp_path, monkeypatch, capsys):
    run = importlib.import_module("run")

    def launch(report, cfg, deadline):
        report.samples["launch"] = _samples()["launch"]

    def mounts(report, cfg, deadline):
        report.results["mounts"] = MOUNT_MEDIANS

    monkeypatch.setattr(run, "SECTIONS", {"launch": launch, "mounts": mounts})
    out = tmp_path / "run.png"
    assert run.main(["--quick", "--sections", "launch,mounts", "--plot", str(out)]) == 0
    assert _series_of(out) == LAUNCH[:4] + MOUNTS
    assert f"plot: {out}" in capsys.readouterr().out
