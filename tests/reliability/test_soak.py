"""Soak: many launches in a row and from many threads leave nothing behind.

Short form by default (CI); ``PYSANDBOX_SOAK=1`` runs the long form: 10,000
sequential launches and 8 threads x 500 launches per backend. Checked: every exit
status (signal deaths have their own test here), every output (no crossed pipes between threads), and
afterwards no new descriptor, host mount, child process, temporary file or /dev/shm
entry; the launcher's RSS stays bounded.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import uuid

import pytest

import pysandbox
from tests.reliability import leaks

LONG = os.environ.get("PYSANDBOX_SOAK") == "1"
SEQUENTIAL = 10_000 if LONG else 300
THREADS, PER_THREAD = (8, 500) if LONG else (4, 25)
WARMUP = 20
# RSS growth allowed after warm-up, whatever the count: caches are bounded, so a
# leak of even a few hundred bytes per launch exceeds this in the long form.
RSS_GROWTH_KIB = 16 * 1024
pytestmark = [pytest.mark.requires("userns"), pytest.mark.slow]


def _expected(i: int) -> int:
    """Exit statuses cycled through: codes, 0 and 255, and 128+N written by the command
    itself (not a signal). Signal deaths are checked on their own below."""
    table = [0, 1, 7, 42, 125, 126, 127, 255, 143, 137]
    return table[i % len(table)]


MARKER = f"psb-soak-{uuid.uuid4().hex}"   # $0 of every soak command: survivors are findable


def _argv(i: int) -> list[str]:
    # Each command also leaves a file in its /dev/shm: the sandbox's own, so the host's
    # /dev/shm must not gain it (leaks.SHM_MARKERS counts names under leaks.SHM_TAG).
    shm = f"/dev/shm/{leaks.SHM_TAG}-{MARKER}-{i}"
    return ["/bin/sh", "-c", f": > {shm} || exit 99; exit {_expected(i)}", MARKER]


def test_sequential(backend, private_tmp):
    policy = pysandbox.Policy.default(network="deny")
    for i in range(WARMUP):
        pysandbox.run(_argv(i), policy=policy, backend=backend)
    before = leaks.snapshot()
    rss_start = leaks.rss_kib()
    rss_mid = None
    wrong = []
    for i in range(SEQUENTIAL):
        got = pysandbox.run(_argv(i), policy=policy, backend=backend).returncode
        if got != _expected(i):
            wrong.append((i, _expected(i), got))
        if i == SEQUENTIAL // 2:
            rss_mid = leaks.rss_kib()
    rss_end = leaks.rss_kib()
    problems = leaks.settle(before) + [f"survivor {s}" for s in leaks.wait_no_survivors(MARKER)]
    print(f"\n{backend}: {SEQUENTIAL} sequential launches, RSS KiB start {rss_start} "
          f"mid {rss_mid} end {rss_end}; {len(wrong)} wrong statuses; leaks: {problems}")
    assert not problems, "left behind: " + "; ".join(problems)
    assert rss_end - rss_start < RSS_GROWTH_KIB, (rss_start, rss_mid, rss_end)
    assert not wrong, f"{len(wrong)} wrong exit statuses (index, want, got), first: {wrong[:5]}"


# What a signal death looks like: -N, as subprocess (docs/ARCHITECTURE.md, SandboxProcess), on both backends (the bwrap
# backend's own init reports the command's raw wait status, as native's does).
SIGNAL_STATUS = {"native": lambda sig: -sig, "bwrap": lambda sig: -sig}


# The command restores the default action first: a signal the test runner inherited as
# ignored (nohup's SIGHUP, a background job's SIGINT) stays ignored in the sandbox, as
# with subprocess, and a shell could not undo that (POSIX: ignored on entry stays).
DIE_BY = ("import os, signal, sys; s = int(sys.argv[1])\n"
          "if s != signal.SIGKILL: signal.signal(s, signal.SIG_DFL)\n"
          "os.kill(os.getpid(), s)")


@pytest.mark.parametrize("sig", [1, 2, 9, 15])
def test_signal_death_returncode(backend, sig):
    policy = pysandbox.Policy.default(network="deny")
    done = pysandbox.run([sys.executable, "-I", "-c", DIE_BY, str(sig), MARKER], policy=policy, backend=backend)
    assert done.returncode == SIGNAL_STATUS[backend](sig)


def test_exit_status_above_128_is_not_a_signal(backend):
    """Control for the table above: a command's own exit 143 stays 143 on both backends."""
    policy = pysandbox.Policy.default(network="deny")
    assert pysandbox.run(["/bin/sh", "-c", "exit 143", MARKER], policy=policy, backend=backend).returncode == 143


def _one(backend, policy, t, i):
    """One launch, alternating run() and Popen(); returns a problem string or None."""
    token = f"t{t}-i{i}"
    code = (t * 31 + i) % 100
    argv = ["/bin/sh", "-c", f'read line; echo "$line {token}"; exit {code}', MARKER]
    if i % 2:
        done = pysandbox.run(argv, policy=policy, backend=backend, input=f"in-{token}\n",
                             capture_output=True, text=True, timeout=120)
        out, rc = done.stdout, done.returncode
    else:
        with pysandbox.Popen(argv, policy=policy, backend=backend, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) as proc:
            out, _ = proc.communicate(f"in-{token}\n", timeout=120)
            rc = proc.returncode
    if rc != code or out != f"in-{token} {token}\n":
        return f"{token}: rc {rc} (want {code}) out {out!r}"
    return None


def test_concurrent(backend, private_tmp):
    policy = pysandbox.Policy.default(network="deny")
    for i in range(4):
        assert _one(backend, policy, 99, i) is None
    before = leaks.snapshot()
    rss_start = leaks.rss_kib()

    def worker(t):
        problems = []
        for i in range(PER_THREAD):
            try:
                problem = _one(backend, policy, t, i)
            except Exception as exc:   # collected, so one failure does not hide the rest
                problem = f"t{t}-i{i}: {type(exc).__name__}: {exc}"
            if problem:
                problems.append(problem)
        return problems

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(worker, range(THREADS)))
    problems = [p for r in results for p in r]
    assert not problems, f"{len(problems)} bad launches, first: {problems[:5]}"
    left = leaks.settle(before) + [f"survivor {s}" for s in leaks.wait_no_survivors(MARKER)]
    assert not left, "left behind: " + "; ".join(left)
    rss_end = leaks.rss_kib()
    assert rss_end - rss_start < RSS_GROWTH_KIB, (rss_start, rss_end)
    print(f"\n{backend}: {THREADS}x{PER_THREAD} concurrent launches, RSS KiB {rss_start} -> {rss_end}")
