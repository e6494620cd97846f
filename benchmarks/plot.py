"""``benchmarks/run.py --plot FILE.png``: the launch latency distributions and the mount
scaling curves of one run, drawn with matplotlib (the optional extra ``pysandbox[plot]``).

Left: the distribution (an empirical CDF, log time axis) of one launch of ``/bin/true``
for each of plain spawn, pysandbox native, pysandbox's bwrap backend, raw bwrap (network
deny), a command in a live session and one through a warm pool (native). Right: the
median launch time against the number of extra read-only binds (floor, native, bwrap
backend, raw bwrap). A series whose section did not run (or whose contender is missing)
is left out; the names of the series drawn are written into the PNG's metadata
(``Series``), so a test, or a reader with ``exiftool``, sees what the picture holds.
"""

from __future__ import annotations

# (series name, samples section, label in that section)
LAUNCH_SERIES = (
    ("plain spawn", "launch", "plain/allow"),
    ("native", "launch", "native/deny"),
    ("bwrap backend", "launch", "bwrap-backend/deny"),
    ("raw bwrap", "launch", "bwrap/deny"),
    ("session", "session", "session native"),
    ("pool", "pool", "pool native"),
)
MOUNT_SERIES = (("floor", "floor"), ("native", "native"), ("bwrap backend", "bwrap-backend"), ("raw bwrap", "bwrap"))


def series(samples: dict, mounts: dict) -> tuple[dict, dict]:
    """``({name: [seconds...]}, {name: [(binds, median seconds)...]})`` of what the run has."""
    launch = {}
    for name, section, label in LAUNCH_SERIES:
        got = samples.get(section, {}).get(label)
        if got:
            launch[name] = sorted(got)
    curves = {}
    for name, key in MOUNT_SERIES:
        points = sorted((int(k.rsplit("/", 1)[1]), v) for k, v in mounts.items()
                        if k.rsplit("/", 1)[0] == key and v is not None)
        if points:
            curves[name] = points
    return launch, curves


def draw(samples: dict, mounts: dict, path: str, title: str = "") -> list[str]:
    """Write the PNG at ``path``; return the names of the series drawn (launch, then
    ``mounts: NAME``).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'pysandbox[plot]'``).
        ValueError: nothing to draw (no launch sample, no mount median).
    """
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install 'pysandbox[plot]'") from exc
    matplotlib.use("Agg")   # a file, no display
    import matplotlib.pyplot as plt
    launch, curves = series(samples, mounts)
    if not launch and not curves:
        raise ValueError("nothing to plot: run the launch, session, pool or mounts sections")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=80)
    for name, values in launch.items():
        n = len(values)
        left.step([v * 1e3 for v in values], [(i + 1) / n for i in range(n)], where="post",
                  label=f"{name} (median {values[n // 2] * 1e3:.1f} ms, n={n})")
    left.set_xscale("log")
    left.set_xlabel("launch of /bin/true, ms (log)")
    left.set_ylabel("fraction of launches at most")
    left.set_title("Launch latency distribution")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8, loc="lower right")
    for name, points in curves.items():
        right.plot([b for b, _ in points], [m * 1e3 for _, m in points], marker="o", label=name)
    right.set_xscale("symlog", linthresh=10)
    right.set_yscale("log")
    right.set_xlabel("extra read-only binds (0, then log)")
    right.set_ylabel("median launch, ms (log)")
    right.set_title("Mount scaling")
    right.grid(True, which="both", alpha=0.3)
    if curves:
        right.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    names = list(launch) + [f"mounts: {name}" for name in curves]
    fig.savefig(path, format="png", metadata={"Software": "pysandbox benchmarks/run.py --plot",
                                              "Series": "; ".join(names)})
    plt.close(fig)
    return names
