"""Pool.run counts itself as a run in progress in the critical section that takes its
sandbox (pysandbox/pool.py _take): the staging thread that take wakes already sees the
run and does not start a staging beside the command (issue 27: the pool's command paid
for a whole staging on a 2-CPU host)."""

from __future__ import annotations

import pytest

import pysandbox

pytestmark = pytest.mark.requires("userns")


class _Recording:
    """The pool's condition, recording the runs in progress at each notify."""

    def __init__(self, cv, pool):
        self._cv, self._pool, self.seen = cv, pool, []

    def __enter__(self):
        return self._cv.__enter__()

    def __exit__(self, *exc):
        return self._cv.__exit__(*exc)

    def notify_all(self):
        self.seen.append(self._pool._active)
        self._cv.notify_all()

    def __getattr__(self, name):
        return getattr(self._cv, name)


def test_a_run_is_counted_before_the_stager_is_woken(backend):
    with pysandbox.Pool(pysandbox.Policy.default(), size=2, backend=backend) as pool:
        for run, want in ((False, 0), (True, 1)):   # control: a plain take (Popen) wakes it uncounted
            with pool._cv:
                while len(pool._ready) < 2:
                    pool._cv.wait(30)
            rec = _Recording(pool._cv, pool)
            pool._cv = rec
            try:
                sb = pool._take(run=run)
            finally:
                pool._cv = rec._cv
            assert rec.seen == [want], rec.seen
            pool._discard(sb, ran=run)
        assert pool._active == 0
        assert pool.run(["true"]).returncode == 0
