"""Soak for sessions and the pool: thousands of commands in one session, hundreds of
pooled launches, on each backend. Checked: every exit status and output, the
session's per-command state (nothing kept once a command's exit is collected, one
command id each), and afterwards no new descriptor of this process, no child process
once close() returned, an unchanged host mount table and no temporary file.
"""

from __future__ import annotations

import pytest

import pysandbox
from tests.reliability import leaks

COMMANDS = 2000
POOLED = 200
WARMUP = 20
pytestmark = [pytest.mark.requires("userns")]


def _command(i: int) -> tuple[list[str], int]:
    """Mostly /bin/true; every 10th a shell exiting with a cycled status."""
    if i % 10:
        return ["/bin/true"], 0
    code = (0, 1, 7, 42, 125, 255)[(i // 10) % 6]
    return ["/bin/sh", "-c", f"exit {code}"], code


def _run_all(run, count: int) -> list:
    wrong = []
    for i in range(count):
        argv, code = _command(i)
        if i % 100 == 50:   # now and then through pipes too
            done = run(["/bin/echo", f"n{i}"], capture_output=True)
            if (done.returncode, done.stdout) != (0, f"n{i}\n".encode()):
                wrong.append((i, done.returncode, done.stdout))
            continue
        got = run(argv).returncode
        if got != code:
            wrong.append((i, code, got))
    return wrong


def _after_close(before: leaks.Snapshot) -> list[str]:
    """What close() left: children at once (close() waits for every sandbox), the rest
    once settled (bounded)."""
    problems = [f"children left after close(): {sorted(leaks.children() - before.children)}"] \
        if leaks.children() - before.children else []
    return problems + leaks.settle(before)


def _warm(policy, backend) -> None:
    """One session opened and closed first: the program memfds are made once per process
    (pysandbox/memfd.py) and kept, by design; they are not what a command leaves."""
    pysandbox.Sandbox(policy, backend=backend).close()


def test_thousands_of_commands_in_one_session(backend):
    policy = pysandbox.Policy.default(network="deny")
    _warm(policy, backend)
    before = leaks.snapshot()
    sb = pysandbox.Sandbox(policy, backend=backend)
    try:
        _run_all(sb.run, WARMUP)
        open_fds = leaks.open_fds()
        wrong = _run_all(sb.run, COMMANDS)
        assert not wrong, f"wrong results (index, expected, got): {wrong[:10]}"
        # per-command state: none kept, one id per command (warm-up included)
        assert sb.channel.commands == {}
        assert next(sb.channel.ids) == WARMUP + COMMANDS + 1
        assert leaks.open_fds() == open_fds, "descriptors grew while the session ran"
    finally:
        sb.close()
    problems = _after_close(before)
    assert not problems, "left behind: " + "; ".join(problems)


def test_hundreds_of_pooled_launches(backend):
    policy = pysandbox.Policy.default(network="deny")
    _warm(policy, backend)
    before = leaks.snapshot()
    pool = pysandbox.Pool(policy, size=4, backend=backend)
    try:
        wrong = _run_all(pool.run, POOLED)
        assert not wrong, f"wrong results (index, expected, got): {wrong[:10]}"
        stats = pool.stats()
        assert stats["used"] == POOLED and stats["failures"] == 0, stats
    finally:
        pool.close()
    problems = _after_close(before)
    assert not problems, "left behind: " + "; ".join(problems)
