"""Pool.run counts itself as a run in progress in the critical section that takes its
sandbox (pysandbox/pool.py _take): the staging thread that take wakes already sees the
run and does not start a staging beside a single command (issue 27: the pool's command
paid for a whole staging on a 2-CPU host); and a run's take from a full pool wakes no
thread at all (a cross-thread wake-up on the command's path)."""

from __future__ import annotations

import threading

import pytest

import pysandbox
from pysandbox import pool as pool_module
from tests.support import wait_until

pytestmark = pytest.mark.requires("userns")


class _Recording:
    """The pool threads' condition (``_jobs``), recording the runs in progress at each
    notify."""

    def __init__(self, cv, pool):
        self._cv, self._pool, self.seen = cv, pool, []

    def __enter__(self):
        return self._cv.__enter__()

    def __exit__(self, *exc):
        return self._cv.__exit__(*exc)

    def notify(self, n=1):
        self.seen.append(self._pool._active)
        self._cv.notify(n)

    def notify_all(self):
        self.seen.append(self._pool._active)
        self._cv.notify_all()

    def __getattr__(self, name):
        return getattr(self._cv, name)


def _full(pool, n):
    with pool._cv:
        while len(pool._ready) < n or pool._staging:
            pool._cv.wait(30)


def test_a_run_is_counted_before_the_stager_is_woken(backend):
    """size 3 (stage beside a run at a stock of 1 or less, pysandbox/pool.py): a Popen's take
    wakes the threads uncounted (the control), a run's take from a full pool wakes none (no
    staging beside a single command, no wake-up on its path), and a second run's take wakes
    them with both runs already counted."""
    with pysandbox.Pool(pysandbox.Policy.default(), size=3, backend=backend) as pool:
        for runs, want in (((False,), [0]), ((True,), []), ((True, True), [2])):
            _full(pool, 3)
            rec = _Recording(pool._jobs, pool)
            pool._jobs = rec
            taken = []
            try:
                for run in runs:
                    rec.seen.clear()   # the last take's wake-ups only
                    taken.append(pool._take(run=run))
            finally:
                pool._jobs = rec._cv
            assert rec.seen == want, (runs, rec.seen)
            if runs == (True,):
                assert pool.stats()["staging"] == 0   # nothing staged beside a single run
            for sb, run in zip(taken, runs):
                pool._discard(sb, ran=run)
        assert pool._active == 0
        assert pool.run(["true"]).returncode == 0


def test_a_sandbox_a_caller_waits_for_skips_its_warm_up(backend, monkeypatch):
    """A staging that a caller is waiting for (nothing was ready) hands its sandbox over
    without Sandbox.warm (pysandbox/pool.py): the wait is not made longer by a warm-up.
    Control: the first sandbox, staged with no caller waiting, is warmed. The staging is
    held at its start until the caller is seen waiting (no timing)."""
    release, made, warmed = threading.Event(), [], []
    release.set()

    class Held(pool_module.Sandbox):
        def __init__(self, *args, **kwargs):
            assert release.wait(60)
            super().__init__(*args, **kwargs)
            made.append(self)

        def warm(self):
            warmed.append(self)
            super().warm()

    monkeypatch.setattr(pool_module, "Sandbox", Held)
    with pysandbox.Pool(pysandbox.Policy.default(), size=1, backend=backend) as pool:
        assert wait_until(lambda: pool.stats()["ready"] == 1, 120), pool.stats()
        assert (len(warmed), pool.stats()["unwarmed"]) == (1, 0)   # the control: no one waited
        release.clear()
        first = pool.Popen(["true"])   # takes it; the next staging starts and is held
        done = []
        caller = threading.Thread(target=lambda: done.append(pool.run(["true"]).returncode))
        caller.start()
        assert wait_until(lambda: pool._waiting == 1, 60)
        release.set()
        caller.join(60)
        assert done == [0]
        assert first.wait(timeout=30) == 0
        # the caller's (the second made) was not warmed; the pool refills on (warmed or not)
        assert made[0] in warmed and made[1] not in warmed, (made, warmed)
        assert pool.stats()["unwarmed"] == 1, pool.stats()
