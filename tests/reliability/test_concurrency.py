"""Concurrency and fork safety.

- ``run`` and ``Popen`` started from many threads at the same instant (a barrier):
  each gets its own output and exit status.
- Fork safety: the library imported and a launch done, then ``os.fork()``; a launch
  in the child works. Also while other threads are launching at the moment of the
  fork (a lock held by another thread at fork time must not deadlock the child):
  the child has an alarm, so a deadlock is a failure, not a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

import pysandbox
from tests.reliability import leaks

pytestmark = pytest.mark.requires("userns")
THREADS = 8


def test_barrier_start_many_threads(backend):
    policy = pysandbox.Policy.default(network="deny")
    barrier = threading.Barrier(THREADS)
    results: dict = {}

    def worker(t):
        try:
            barrier.wait(timeout=60)
            if t % 2:
                done = pysandbox.run(["/bin/sh", "-c", f"echo t{t}; exit {t}"], policy=policy,
                                     backend=backend, capture_output=True, text=True, timeout=120)
                results[t] = (done.returncode, done.stdout)
            else:
                with pysandbox.Popen(["/bin/sh", "-c", f"echo t{t}; exit {t}"], policy=policy,
                                     backend=backend, stdout=subprocess.PIPE, text=True) as proc:
                    out, _ = proc.communicate(timeout=120)
                results[t] = (proc.returncode, out)
        except Exception as exc:   # reported below
            results[t] = (type(exc).__name__, str(exc))

    with leaks.unchanged():
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=180)
        assert not any(th.is_alive() for th in threads), "a launch thread hung"
    assert results == {t: (t, f"t{t}\n") for t in range(THREADS)}


def _fork_and_launch(backend, policy) -> int:
    """Fork; the child launches ``exit 42`` and exits with what it got (0 on success).

    Returns the child's wait status decoded: 0 ok, otherwise a code naming the failure
    (100 + wrong status, 90 exception, -SIGALRM for a deadlock).
    """
    pid = os.fork()
    if pid == 0:
        code = 90
        try:
            signal.alarm(60)
            done = pysandbox.run(["/bin/sh", "-c", "exit 42"], policy=policy, backend=backend, timeout=60)
            code = 0 if done.returncode == 42 else 100 + (done.returncode & 0x7F)
        except BaseException:
            code = 90
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_fork_after_launch(backend):
    policy = pysandbox.Policy.default(network="deny")
    assert pysandbox.run(["/bin/true"], policy=policy, backend=backend).returncode == 0
    with leaks.unchanged():
        assert _fork_and_launch(backend, policy) == 0
    # and the parent still launches after the child did
    assert pysandbox.run(["/bin/sh", "-c", "exit 3"], policy=policy, backend=backend).returncode == 3


def test_fork_while_other_threads_launch(backend):
    policy = pysandbox.Policy.default(network="deny")
    stop = threading.Event()
    errors = []

    def busy():
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                pysandbox.run(["/bin/true"], policy=policy, backend=backend, timeout=60)
            except Exception as exc:
                errors.append(repr(exc))
                return

    threads = [threading.Thread(target=busy) for _ in range(3)]
    for th in threads:
        th.start()
    try:
        outcomes = [_fork_and_launch(backend, policy) for _ in range(8)]
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=120)
    assert not errors, errors
    assert outcomes == [0] * 8, f"child outcomes (0 ok, -14 deadlock, 90 exception): {outcomes}"


def test_fresh_import_then_fork(backend, tmp_path):
    """Imported but never launched before the fork: the child's first launch works."""
    code = f"""
import os, sys
import pysandbox
pid = os.fork()
if pid == 0:
    import signal
    signal.alarm(60)
    rc = pysandbox.run(["/bin/sh", "-c", "exit 5"], backend={backend!r}).returncode
    os._exit(0 if rc == 5 else 1)
_, st = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(st))
"""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    done = subprocess.run([os.sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, (done.returncode, done.stderr)


def test_sandbox_outlives_the_thread_that_started_it(backend):
    """die-with-parent means the launching *process*: PR_SET_PDEATHSIG fires when the
    thread that forked exits, so a sandbox started from a short-lived thread (a pool
    worker) must not die with that thread."""
    policy = pysandbox.Policy.default(network="deny")
    box = {}

    def start():
        box["proc"] = pysandbox.Popen(["/bin/sh", "-c", "sleep 1; echo done"], policy=policy,
                                      backend=backend, stdout=subprocess.PIPE, text=True)

    with leaks.unchanged():
        starter = threading.Thread(target=start)
        starter.start()
        starter.join(timeout=60)
        proc = box["proc"]
        out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "done\n")
