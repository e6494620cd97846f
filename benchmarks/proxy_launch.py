"""run.py's ``proxy_launch`` section: what network proxy mode adds to a launch
(pysandbox/egress.py: the listener the setup makes and hands over, the engine started
and closed with the sandbox), against the same launch in deny mode, per backend,
alternated round by round. Each round is ``pysandbox.run(["true"])``; proxy mode's
includes receiving the listener, starting EgressProxy's thread and joining it at the
end. Reported: medians, p90, proxy over deny from this run.
"""

from __future__ import annotations

import measure as M
from measure import Summary, ms, ratio
from sessions import Call


def section_proxy_launch(report, cfg: dict, deadline: float) -> None:
    import pysandbox
    rounds = cfg["launch_rounds"]
    deny = pysandbox.Policy.default(network="deny")
    proxy = pysandbox.Policy.default(network="proxy", allow_hosts=("pypi.org",))
    results = {}
    report.out(f"## Network proxy mode: a launch of `true`, deny and proxy ({rounds} rounds, alternated)")
    report.out()
    for backend in ("native", "bwrap"):
        if not pysandbox.status(deny, backend=backend).available:
            report.out(f"{backend}: unavailable here, skipped")
            continue
        calls = [Call(f"{backend} {mode}", lambda p=policy, b=backend: pysandbox.run(["true"], policy=p, backend=b))
                 for mode, policy in (("deny", deny), ("proxy", proxy))]
        samples = M.alternate(calls, rounds, warmup=3, deadline=deadline)
        stats = {k: Summary.of(v) for k, v in samples.items()}
        base = stats[f"{backend} deny"].median
        report.table(["launch", "median ms", "p90 ms", "median / deny", "added ms (median)", "n"],
                     [[k, ms(s.median), ms(s.p90), ratio(s.median, base), ms(s.median - base), s.n]
                      for k, s in stats.items()])
        results[backend] = {k: vars(v) for k, v in stats.items()}
    report.results["proxy_launch"] = results
