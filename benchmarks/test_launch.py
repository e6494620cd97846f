"""Launch latency of /bin/true on the default policy, per contender and network mode.

Compare within one group (launch-deny, launch-allow); ratios, not absolute times.
"""

import pytest

CASES = [("plain", "allow")] + [(name, network) for network in ("deny", "allow")
                                for name in ("floor", "native", "bwrap-backend", "bwrap")]


@pytest.mark.parametrize("name,network", CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_launch(benchmark, make_contender, name, network):
    contender = make_contender(name, network)
    benchmark.group = f"launch-{network}"
    benchmark.pedantic(contender.launch, rounds=200, warmup_rounds=5)
