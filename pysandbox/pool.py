"""A warm pool of one-shot sandboxes: ``Pool(policy, size=N)``.

Each sandbox is a session (pysandbox/session.py) staged in the background up to the
point of exec: namespaces made, mounts done, the server waiting with the first
command's keeper armed (native/psb_session.c), and warmed (``Sandbox.warm``: the
launcher's environment cache), so the first command in it costs what a later one would.
``pool.run(argv)`` takes one, runs exactly one command in it and discards it, so every
command still gets a fresh sandbox (nothing of an earlier command's files in /tmp,
processes or namespaces), with the setup off the critical path.

Background threads (up to ``size``, at most ``STAGERS_PER_CPU`` a CPU) stage sandboxes in
parallel until ``size`` are ready or being staged, ahead of demand. While a ``run`` of
the pool is in progress a new staging starts only once at most ``size - 2`` are ready or
being staged (none, for a pool of 1 or 2): a run taken from a full pool never shares its
time with a staging, whose Python parts would hold the GIL the command's thread needs
(and, on a small machine, its CPU), while back-to-back runs find the refill already
under way instead of waiting for a whole staging once the pool ran dry. Closing used
sandboxes comes after staging, and waits while a command runs unless ``size`` are waiting
to be closed. A take or a discard wakes one thread, and only when that gives it work (a
thread that finds more to do wakes the next one), so a run's own path pays for no
cross-thread wake-up it can avoid (each costs it the GIL and tens of microseconds). ``close()`` ends
them all.

When no sandbox is ready (a burst faster than the refill), ``run`` waits for the
next one, which then skips its warm-up; if the refill fails (the backend cannot run here) the error is raised to
the caller rather than retried in a loop.
"""

from __future__ import annotations

import collections
import os
import threading
import time

from .errors import PolicyError, Reason, SessionError
from .lifecycle import KILL_GRACE
from .policy import Policy
from .session import Sandbox, SessionProcess

TAKE_TIMEOUT = 60.0   # seconds a caller waits for a staged sandbox
STAGERS_PER_CPU = 2   # staging threads a CPU at most (each mostly waits for the kernel)


class Pool:
    """Up to ``size`` staged sandboxes of ``policy`` on ``backend``; see the module.

    ``stats()``: ready now, being staged now, used ones waiting to be closed or being
    closed now (``closing``), staged, used, failed refills, staged sandboxes handed to a
    waiting caller without a warm-up (``unwarmed``), and the mean seconds to stage one. ``ready == size`` with ``closing == 0`` means the pool's threads are idle.

    Raises (from the constructor):
        PolicyError: a bad ``size``.

    Raises (from run/Popen):
        SessionError (session_closed): the pool is closed.
        The refill's own error (BackendUnavailable, CapabilityUnavailable, SetupError,
        SessionError) when the pool cannot stage a sandbox here.
    """

    def __init__(self, policy: Policy | None = None, size: int = 2, backend: str = "auto"):
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 64:
            raise PolicyError("size must be an int from 1 to 64", Reason.INVALID_VALUE, size)
        self.policy = policy if policy is not None else Policy.default()
        self._caller_start = policy is None   # with no policy, commands start where the caller is (session.py)
        self.backend = backend
        self.size = size
        lock = threading.RLock()
        self._cv = threading.Condition(lock)     # the pool's state; callers waiting for a sandbox
        self._jobs = threading.Condition(lock)   # the same lock: the threads waiting for work
        self._ready: collections.deque[Sandbox] = collections.deque()
        self._used: collections.deque[Sandbox] = collections.deque()
        self._error: BaseException | None = None
        self._closed = False
        self._staging = 0    # sandboxes being staged now
        self._active = 0     # run() calls in progress (a Popen may live long: not counted)
        self._running = 0    # background threads not yet returned (under the lock)
        self._closing = 0    # used sandboxes being closed now (outside the lock)
        self._low = max(0, size - 2)   # while a run is in progress, stage only at this stock or less
        self._staged = self._taken = self._failures = 0
        self._waiting = 0    # callers waiting in _take for a sandbox (nothing ready)
        self._unwarmed = 0   # sandboxes handed to a waiting caller without Sandbox.warm
        self._stage_seconds = 0.0
        workers = min(size, STAGERS_PER_CPU * (os.cpu_count() or 1))
        self._threads = [threading.Thread(target=self._work, name=f"pysandbox-pool-{i}", daemon=True)
                         for i in range(workers)]
        self._running = workers
        for t in self._threads:
            t.start()

    # ---------------------------------------------------------------- background
    def _next_job(self):
        """Under the lock: "stage", a used sandbox to close, or None (the thread ends)."""
        while True:
            if self._closed:
                if self._used:
                    self._closing += 1
                    return self._used.popleft()
                return None
            job = self._job()
            if job == "stage":
                self._staging += 1
            elif job is not None:
                self._closing += 1
                self._used.popleft()
            if job is not None:
                if self._job() is not None:
                    self._jobs.notify()   # one more thread, woken by this one: off a caller's path
                return job
            self._jobs.wait()

    def _job(self):
        """Under the lock: the job a thread may start now ("stage", a used sandbox), or None.
        While a run() of the pool is in progress, staging waits until the stock (ready or
        being staged) is down to ``_low``, and closing until ``size`` are used: their Python
        parts would hold the GIL the command's thread needs to collect its events, but
        back-to-back runs must not wait for a whole staging once the pool ran dry."""
        busy = self._active > 0
        stock = len(self._ready) + self._staging
        if self._error is None and stock < self.size and (not busy or stock <= self._low):
            return "stage"
        if self._used and (not busy or len(self._used) >= self.size):
            return self._used[0]
        return None

    def _work(self) -> None:
        while True:
            with self._cv:
                job = self._next_job()
                if job is None:
                    self._running -= 1
                    self._cv.notify_all()
                    return
            if job != "stage":
                try:
                    job.close()
                finally:
                    with self._cv:
                        self._closing -= 1   # read by stats() only: no one to wake
                continue
            self._stage_one()

    def _stage_one(self) -> None:
        t0 = time.monotonic()
        sb = None
        try:
            sb = Sandbox(self.policy, self.backend, caller_directory=self._caller_start)
            if self._waiting:
                # a caller is waiting for this one: handed over at once, unwarmed
                # (docs/ARCHITECTURE.md, the pool)
                with self._cv:
                    self._unwarmed += 1
            else:
                sb.warm()
        except BaseException as exc:   # noqa: BLE001 - handed to the callers
            with self._cv:
                self._staging -= 1
                self._error, self._failures = exc, self._failures + 1
                if sb is not None:
                    self._used.append(sb)
                self._cv.notify_all()   # the callers waiting: the error
                self._jobs.notify()     # the failed sandbox to close
            return
        with self._cv:
            self._staging -= 1
            self._staged += 1
            self._stage_seconds += time.monotonic() - t0
            if self._closed:
                self._used.append(sb)
            else:
                self._ready.append(sb)
            self._cv.notify_all()

    def _discard(self, sb: Sandbox, ran: bool = False) -> None:
        with self._cv:
            self._active -= ran
            if self._running:
                self._used.append(sb)
                if self._active == 0 or len(self._used) >= self.size:
                    self._jobs.notify()   # one thread; it wakes another if more is to do
                # else no thread has work to do: none is woken
                return
        sb.close()   # the pool closed while this command ran

    def _take(self, timeout: float = TAKE_TIMEOUT, run: bool = False) -> Sandbox:
        """A ready sandbox. ``run``: counted as a run in progress in the same critical section
        that takes it, so the staging thread this take wakes already sees it (else it could
        start a whole staging alongside the command: issue 27's pool at 2x a plain spawn)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                if self._closed:
                    raise SessionError("the pool is closed", Reason.SESSION_CLOSED)
                if self._ready:
                    sb = self._ready.popleft()
                    self._taken += 1
                    if not sb.closed and sb.channel.lost is None:
                        self._active += run
                        # a run's take wakes the threads only when they may stage beside it
                        # (_next_job); each wake-up costs the command's thread the GIL and a CPU
                        if not run or len(self._ready) + self._staging <= self._low:
                            self._jobs.notify()   # one thread; it wakes another if more is to do
                        return sb
                    self._used.append(sb)
                    self._jobs.notify()
                    continue
                if self._error is not None:
                    err, self._error = self._error, None   # the next take tries again
                    self._jobs.notify()
                    raise err
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SessionError(f"no sandbox was staged within {timeout} s", Reason.SESSION_UNAVAILABLE)
                self._waiting += 1
                try:
                    self._cv.wait(left)
                finally:
                    self._waiting -= 1

    # ---------------------------------------------------------------- the API
    def Popen(self, args, **kwargs) -> SessionProcess:
        """Start ``args`` in a fresh staged sandbox, discarded once the command's exit is
        collected (``wait``/``poll``/``communicate``)."""
        sb = self._take()
        try:
            proc = sb.Popen(args, **kwargs)
        except BaseException:
            self._discard(sb)
            raise
        proc.child.on_close = lambda: self._discard(sb)
        return proc

    def run(self, args, *, timeout: float | None = None, kill_grace: float = KILL_GRACE, **kwargs):
        """Run ``args`` in a fresh staged sandbox and discard it, as
        :meth:`pysandbox.session.Sandbox.run`. While it runs the pool's threads stage
        only if nothing is ready (see the module)."""
        sb = self._take(run=True)
        try:
            return sb.run(args, timeout=timeout, kill_grace=kill_grace, **kwargs)
        finally:
            self._discard(sb, ran=True)

    def stats(self) -> dict:
        with self._cv:
            return {"size": self.size, "ready": len(self._ready), "staging": self._staging,
                    "closing": len(self._used) + self._closing, "staged": self._staged, "used": self._taken,
                    "failures": self._failures, "unwarmed": self._unwarmed,
                    "stage_seconds_mean": self._stage_seconds / self._staged if self._staged else None}

    def close(self) -> None:
        """Close every staged and used sandbox and stop the refill; nothing is left."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._used.extend(self._ready)
            self._ready.clear()
            self._cv.notify_all()
            self._jobs.notify_all()
        for t in self._threads:
            t.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
