"""PYSANDBOX_TEST_VIA_SESSION=1: the security suite once more, every command through a session.

Every invariant the suite proves of a one-shot sandbox must hold for each command of a
session too. With the variable set, an autouse fixture replaces ``pysandbox.run`` and
``pysandbox.Popen`` (the names every test and tests/security/oracles.py call through the
module) by versions that start a :class:`pysandbox.session.Sandbox` for the policy and
backend and run the one command in it; the sandbox is closed when the command ends.

A call a session cannot express takes the one-shot path, and is counted (listed at the
end of the run, so a fallback never hides silently):
  * ``on_start=`` / ``close_in_setup=``: hooks into a one-shot launch's setup;
  * a policy without a pid namespace: a session needs its server as pid 1;
  * a policy without procfs at /proc: the server is exec'd through /proc/self/fd and
    reads /proc/1/task/1/children;
  * ``policy.as_pid_1``: the command itself as pid 1 is what such a test is about; a
    session's commands never are (the server is).
Tests whose subject is one-shot only carry ``pytest.mark.one_shot_only(reason)`` and are
skipped here with that reason.

PYSANDBOX_TEST_SESSION_LIMITS=1 as well: each such session also carries resource limits
(pysandbox/session_limits.py) where its policy has none: a generous pids budget (its
cgroup, or RLIMIT_NPROC without one) and, where a memory cgroup can be made, a memory
one, so every command goes through the limited path (a LIMITS frame, a marked SPAWN, its
rlimits set in its own process) and every invariant must hold there too.
"""

from __future__ import annotations

import collections
import os

import pytest

import pysandbox
import pysandbox.session

VIA_SESSION = os.environ.get("PYSANDBOX_TEST_VIA_SESSION") == "1"
SESSION_LIMITS = os.environ.get("PYSANDBOX_TEST_SESSION_LIMITS") == "1"
FALLBACKS: collections.Counter = collections.Counter()


def _fallback_reason(policy, kwargs) -> str | None:
    if kwargs.get("on_start") is not None:
        return "on_start="
    if kwargs.get("close_in_setup"):
        return "close_in_setup="
    policy = policy if policy is not None else pysandbox.Policy.default()
    if "pid" not in policy.namespaces:
        return "policy without a pid namespace"
    if not any(isinstance(op, pysandbox.Proc) and op.dest == "/proc" for op in policy.fs):
        return "policy without procfs at /proc"
    if policy.as_pid_1:
        return "policy.as_pid_1"
    return None


class _SessionPopen(pysandbox.session.SessionProcess):
    """A session command that owns its session: closed once the command is reaped."""

    def _close_session(self):
        if self.returncode is not None and not self.session.closed:
            self.session.close()

    def poll(self):
        code = super().poll()
        self._close_session()
        return code

    def wait(self, timeout=None):
        try:
            return super().wait(timeout)
        finally:
            self._close_session()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if not self.session.closed:
                self.kill()
                self.session.close()


def _session(policy, backend):
    """The session for one command (PYSANDBOX_TEST_SESSION_LIMITS=1: with limits)."""
    if not SESSION_LIMITS or (policy is not None and policy.limits is not None):
        return pysandbox.session.Sandbox(policy, backend)
    from pysandbox.cgroup import host_support
    memory = "2G" if host_support("memory")[0] else None
    limited = (policy or pysandbox.Policy.default()).replace(limits=pysandbox.Limits(pids=4096, memory=memory))
    return pysandbox.session.Sandbox(limited, backend, caller_directory=policy is None)


def session_popen(real_popen):
    def Popen(args, *, policy=None, backend="auto", **kwargs):
        why = _fallback_reason(policy, kwargs)
        if why is not None:
            FALLBACKS[f"Popen: {why}"] += 1
            return real_popen(args, policy=policy, backend=backend, **kwargs)
        sb = _session(policy, backend)
        try:
            return _SessionPopen(sb, args, **kwargs)
        except BaseException:
            sb.close()
            raise
    return Popen


def session_run(real_run):
    def run(args, *, policy=None, backend="auto", **kwargs):
        why = _fallback_reason(policy, kwargs)
        if why is not None:
            FALLBACKS[f"run: {why}"] += 1
            return real_run(args, policy=policy, backend=backend, **kwargs)
        with _session(policy, backend) as sb:
            return sb.run(args, **kwargs)
    return run


@pytest.fixture(autouse=True)
def _via_session(request, monkeypatch):
    if not VIA_SESSION:
        yield
        return
    mark = request.node.get_closest_marker("one_shot_only")
    if mark is not None:
        pytest.skip(f"one-shot only: {mark.args[0] if mark.args else mark.kwargs.get('reason', '')}")
    monkeypatch.setattr(pysandbox, "run", session_run(pysandbox.run))
    monkeypatch.setattr(pysandbox, "Popen", session_popen(pysandbox.Popen))
    yield


def pytest_terminal_summary(terminalreporter):
    if not VIA_SESSION:
        return
    terminalreporter.section("PYSANDBOX_TEST_VIA_SESSION=1: calls that took the one-shot path")
    if not FALLBACKS:
        terminalreporter.write_line("none")
    for what, n in sorted(FALLBACKS.items()):
        terminalreporter.write_line(f"{n:5d}  {what}")
