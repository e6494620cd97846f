"""run.py's ``denials`` section: what ``Policy(report_denials=True)`` costs
(pysandbox/denials.py: the filter with a notification listener, the observer thread,
one round trip to it per observed call), against the same policy without, per backend,
alternated round by round. Two workloads: a launch of ``true`` (launch latency), and a
write-heavy command: ``WRITES`` create-truncate-close of files in the workdir (each one
an observed ``openat`` the kernel allows), and as many refused writes to ``/etc`` (each
one observed, recorded and counted). Reported: medians, p90, with over without.
"""

from __future__ import annotations

import shutil
import tempfile

import measure as M
from measure import Summary, ms, ratio
from sessions import Call

WRITES = 2000
WRITE_HEAVY = ("import os,sys\nw=sys.argv[1]\nfor i in range(%d):\n"
               " os.close(os.open(os.path.join(w,'f%%d'%%(i%%50)),os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644))\n"
               " try: os.open('/etc/psb-bench-%%d'%%(i%%50),os.O_WRONLY|os.O_CREAT,0o644)\n"
               " except OSError: pass\n" % WRITES)


def section_denials(report, cfg: dict, deadline: float) -> None:
    import sys
    import pysandbox
    rounds = cfg["launch_rounds"]
    work = tempfile.mkdtemp(prefix="psb-bench-denials-")
    try:
        off = pysandbox.Policy.default(workdir=work)
        on = pysandbox.Policy.default(workdir=work, report_denials=True)
        results = {}
        report.out(f"## Denials: report_denials off and on ({rounds} launches of `true`, {max(rounds // 10, 3)} "
                   f"write-heavy runs of {WRITES} allowed + {WRITES} refused opens; alternated)")
        report.out()
        for backend in ("native", "bwrap"):
            if not pysandbox.status(off, backend=backend).available:
                report.out(f"{backend}: unavailable here, skipped")
                continue
            rows = []
            for name, argv, n in (("launch", ["true"], rounds),
                                  ("write-heavy", [sys.executable, "-I", "-c", WRITE_HEAVY, work],
                                   max(rounds // 10, 3))):
                calls = [Call(f"{backend} {name} {mode}",
                              lambda p=policy, b=backend, a=argv: pysandbox.run(a, policy=p, backend=b, check=True))
                         for mode, policy in (("off", off), ("on", on))]
                samples = M.alternate(calls, n, warmup=2, deadline=deadline)
                stats = {k: Summary.of(v) for k, v in samples.items()}
                base = stats[f"{backend} {name} off"].median
                rows += [[k, ms(s.median), ms(s.p90), ratio(s.median, base), ms(s.median - base), s.n]
                         for k, s in stats.items()]
                results[f"{backend} {name}"] = {k: vars(v) for k, v in stats.items()}
            report.table(["run", "median ms", "p90 ms", "median / off", "added ms (median)", "n"], rows)
        report.results["denials"] = results
    finally:
        shutil.rmtree(work, ignore_errors=True)
