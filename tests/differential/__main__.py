"""``python -m tests.differential``: run the corpus and generated policies under two
backends and print each policy, its verdict and, on a mismatch, the differing fields.

    python -m tests.differential                      # corpus + 20 generated
    python -m tests.differential --count 300 --seed 7 # more generated, reproducible
    python -m tests.differential --only chmod -v      # one corpus case, policy shown
    python -m tests.differential --backends bwrap,bwrap   # self-consistency of one backend

Exit status 0 when every policy gave the same sandbox and left the host unchanged.
"""

from __future__ import annotations

import argparse
import random
import re
from collections import Counter
import sys
import time

from tests.support import policy_corpus as corpus
from . import runner


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.differential", description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20, help="generated policies (default 20)")
    ap.add_argument("--seed", type=int, default=None, help="seed for the generated policies")
    ap.add_argument("--backends", default="native,bwrap", help="two backends, comma-separated")
    ap.add_argument("--only", default=None, help="run only corpus cases whose name contains this")
    ap.add_argument("--no-corpus", action="store_true", help="generated policies only")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every policy, not only failures")
    args = ap.parse_args(argv)
    backends = tuple(args.backends.split(","))
    if len(backends) != 2:
        ap.error("--backends takes exactly two names")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    world = runner.World.create()
    counts: dict[str, int] = {}
    start = time.monotonic()
    try:
        cases = [] if args.no_corpus else [(n, b) for n, b in corpus.CASES if args.only is None or args.only in n]
        for name, build in cases:
            _report(runner.compare_backends(name, build(world), world, backends), counts, args.verbose)
        if args.only is None and args.count > 0:
            from .strategies import sample_policies
            print(f"# generated policies: count={args.count} seed={seed}")
            for i, policy in enumerate(sample_policies(world, args.count, seed)):
                _report(runner.compare_backends(f"generated-{i}", policy, world, backends), counts,
                        args.verbose)
    finally:
        world.remove()
    total = sum(counts.values())
    summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    if _FIELDS:
        print("# differing fields, by number of policies:")
        for name, n in _FIELDS.most_common(25):
            print(f"#   {n:5}  {name}")
    print(f"# {total} policies in {time.monotonic() - start:.1f}s: {summary} (seed {seed})")
    bad = sum(v for k, v in counts.items() if k in ("mismatch", "host-changed"))
    return 1 if bad else 0


_FIELDS: Counter = Counter()


def _report(verdict, counts, verbose):
    counts[verdict.verdict] = counts.get(verdict.verdict, 0) + 1
    _FIELDS.update({_field_class(f) for f, _, _ in verdict.diffs})
    print(runner.format_verdict(verdict, verbose), flush=True)


def _field_class(field: str) -> str:
    """A differing field with its path-specific parts wildcarded, for the summary."""
    field = re.sub(r"^mount \S+#\d+\.", "mount *.", field)
    field = re.sub(r"^paths\.\S*?\.(entries|\.)", r"paths.*.\1", field)
    return re.sub(r"\.entries\.[^.]+\.", ".entries.*.", field)


if __name__ == "__main__":
    sys.exit(main())
