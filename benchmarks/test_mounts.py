"""Mount scaling: launch cost with 0, 10, 100, 400 and 1,000 extra read-only binds.

The cost per bind ((t(N) - t(0)) / N, in extra_info of each run) should stay flat
for native and the floor: no per-bind rescan of the mount table.
"""

import pytest

from conftest import BIND_COUNTS

NAMES = ("floor", "native", "bwrap-backend", "bwrap")
ROUNDS = {0: 50, 10: 50, 100: 20, 400: 8, 1000: 4}


@pytest.mark.parametrize("count", BIND_COUNTS)
@pytest.mark.parametrize("name", NAMES)
def test_binds(benchmark, make_contender, bind_dirs, name, count):
    contender = make_contender(name, "deny", bind_dirs.first(count))
    benchmark.group = f"binds-{count}"
    benchmark.extra_info["binds"] = count
    benchmark.pedantic(contender.launch, rounds=ROUNDS[count], warmup_rounds=1)
