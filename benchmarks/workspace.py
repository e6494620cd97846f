"""Workspaces against a plain session, side by side in one run (issue 29's targets):

- ``session``: a session on the project itself (Sandbox + one ``true`` + close);
- ``ws_session``: a fresh Workspace of the project, then the same session over it;
- ``snapshot``: ``ws.snapshot()`` of a workspace with one changed file;
- ``fork_session``: ``snap.fork()`` plus the same session over the fork;

each for a 10-file and a 10,000-file project. Rounds interleave the contenders, so
load drifts hit them alike; the medians and the two ratios the issue targets are
printed (fork+session within 1.5x of a fresh workspace's session; the 10,000-file
project within 1.2x of the 10-file one).

    python benchmarks/workspace.py [--rounds N] [--backend native] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pysandbox  # noqa: E402


def make_project(root: str, files: int) -> str:
    path = os.path.join(root, f"proj{files}")
    for i in range(files):
        d = os.path.join(path, f"d{i // 100}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}"), "w") as f:
            f.write("x\n")
    return path


def session_once(workdir, backend) -> float:
    start = time.perf_counter()
    with pysandbox.Sandbox(pysandbox.Policy.default(workdir=workdir), backend=backend) as sb:
        if sb.run(["true"]).returncode != 0:
            raise SystemExit("true failed in the session")
    return time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--backend", default="native")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="psb-bench-ws-", dir="/var/tmp") as root:
        for files in (10, 10_000):
            project = make_project(root, files)
            base = pysandbox.Workspace(project)
            pysandbox.run(["sh", "-c", "echo step > state"], policy=pysandbox.Policy.default(workdir=base),
                          backend=args.backend)
            snap = base.snapshot()
            times: dict = {k: [] for k in ("session", "ws_session", "snapshot", "fork_session")}
            for _ in range(args.rounds):
                times["session"].append(session_once(project, args.backend))
                start = time.perf_counter()
                ws = pysandbox.Workspace(project)
                times["ws_session"].append(time.perf_counter() - start + session_once(ws, args.backend))
                start = time.perf_counter()
                fork = snap.fork()
                times["fork_session"].append(time.perf_counter() - start + session_once(fork, args.backend))
                with open(os.path.join(ws.upper, "changed"), "w") as f:
                    f.write("c")
                start = time.perf_counter()
                ws.snapshot()
                times["snapshot"].append(time.perf_counter() - start)
                ws.remove()
                fork.remove()
            base.remove()
            results[files] = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"{'project':>12} " + " ".join(f"{k:>14}" for k in results[10]) + "   (median ms)")
    for files, row in results.items():
        print(f"{files:>8} files " + " ".join(f"{v:14.2f}" for v in row.values()))
    for files, row in results.items():
        print(f"{files} files: fork+session / fresh workspace session = "
              f"{row['fork_session'] / row['ws_session']:.2f} (target <= 1.5); "
              f"workspace session / plain session = {row['ws_session'] / row['session']:.2f}")
    print(f"fork+session, 10,000 files / 10 files = {results[10_000]['fork_session'] / results[10]['fork_session']:.2f} "
          "(target <= 1.2)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
