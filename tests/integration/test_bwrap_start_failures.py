"""The bwrap backend's as_pid_1 start when the sandbox dies between the lifetime
monitor's start and the init's gate (pysandbox/backends/bwrap/bwrap_launch.py ``watch``): the launch
raises its own typed error and leaves no process of the launcher behind. Before the fix,
``proc.kill()`` polled and reaped a bwrap that had already exited, the ``waitpid`` after
it raised ChildProcessError (ECHILD) in place of the launch's error, and the cleanup after
it never ran: the monitor stayed a zombie of the launcher (seen in CI as a differential
mismatch "bwrap: ChildProcessError" and a zombie failing four later tests). Live control:
the same launch without the injected death runs."""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

import pysandbox
from pysandbox.backends import monitor

pytestmark = pytest.mark.requires("userns", "bwrap")


def _children() -> set[int]:
    out = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            out |= {int(p) for p in f.read().split()}
    return out


def _policy(tmp_path):
    return pysandbox.Policy.default(workdir=str(tmp_path)).replace(as_pid_1=True)


def test_a_sandbox_dying_before_the_gate_fails_typed_and_leaves_nothing(tmp_path, monkeypatch):
    done = pysandbox.run(["true"], policy=_policy(tmp_path), backend="bwrap")   # live control
    assert done.returncode == 0
    real = monitor.start

    def start_then_kill_pid1(pid1_fd):
        got = real(pid1_fd)
        signal.pidfd_send_signal(pid1_fd, signal.SIGKILL)   # the sandbox's pid 1 (our init) dies
        select.select([pid1_fd], [], [], 10)
        time.sleep(0.5)   # and bwrap after it: exited before the launcher's cleanup runs
        return got

    monkeypatch.setattr(monitor, "start", start_then_kill_pid1)
    before = _children()
    with pytest.raises(pysandbox.SandboxError):
        pysandbox.run(["true"], policy=_policy(tmp_path), backend="bwrap")
    assert _children() - before == set()


def test_an_init_failing_before_its_gate_is_reported_as_its_own_failure(tmp_path, monkeypatch):
    # A refused capability set, with the launcher's monitor start slow (seen as an
    # unprivileged user under load, when our init applied the kept capabilities before its
    # gate and exited first: "ended before its init's gate opened", no step). The init now
    # waits at the gate before its first op, and a gate write that finds the init gone is
    # classified by the init's own report: either way the launch reports the capability
    # step, as it does without the delay.
    from pysandbox import sandbox_start
    from pysandbox.backends.bwrap import bwrap_tail
    from pysandbox.backends.native import native_translate
    policy = pysandbox.Policy.default(workdir=str(tmp_path)).replace(as_pid_1=True, caps_keep=("chown",))
    pysandbox.run(["true"], policy=policy, backend="bwrap")   # control: the policy itself runs
    names = list(native_translate.CAPABILITIES) + [f"unknown{i}" for i in range(len(native_translate.CAPABILITIES), 63)]
    at = names.index("chown")
    names[at], names[62] = names[62], names[at]   # a kept set no kernel has: capset refuses it
    monkeypatch.setattr(native_translate, "CAPABILITIES", tuple(names))
    monkeypatch.setattr(bwrap_tail, "_cache", {})
    monkeypatch.setattr(sandbox_start, "_plan_cache", {})
    monkeypatch.setattr(sandbox_start, "_plan_by_id", {})

    def failures(delay):
        real = monitor.start

        def slow_start(pid1_fd):
            got = real(pid1_fd)
            time.sleep(delay)
            return got
        monkeypatch.setattr(monitor, "start", slow_start)
        try:
            pysandbox.run(["true"], policy=policy, backend="bwrap")
        except pysandbox.SetupError as exc:
            return exc
        finally:
            monkeypatch.setattr(monitor, "start", real)
        raise AssertionError("the refused capability set ran")
    prompt, late = failures(0), failures(1.0)
    assert prompt.op is not None and late.op == prompt.op, (prompt, late)
    assert (late.reason, late.stage, late.errno) == (prompt.reason, prompt.stage, prompt.errno), (prompt, late)


def test_pid1_gone_before_the_monitor_is_diagnosed_and_runs_nothing(tmp_path, monkeypatch):
    # Seen once in CI (differential, bwrap 0.11, as_pid_1): the sandbox's pid 1 was gone
    # when the launcher went to hold it, and the launch raised a generic "pid 1 ended
    # before its lifetime monitor could hold it" that named no step. Now the launch reads
    # what ended it (the init's report, bwrap's exit) as any other launch does, and the
    # command never runs. Injected: pid 1 killed and reaped by bwrap before the lookup.
    import pysandbox.backends.bwrap as bwrap_backend
    marker = tmp_path / "ran"
    argv = ["sh", "-c", f"echo yes > {marker}"]
    assert pysandbox.run(argv, policy=_policy(tmp_path), backend="bwrap").returncode == 0   # live control
    assert marker.exists()
    marker.unlink()
    real = bwrap_backend.pid1_fd

    def killed_first(child_pid, bwrap_pid):
        fd = real(child_pid, bwrap_pid)
        assert fd >= 0   # alive when bwrap named it: the injection is what ends it
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        select.select([fd], [], [], 10)
        os.close(fd)
        time.sleep(0.3)   # bwrap reaps it (and exits)
        return real(child_pid, bwrap_pid)

    monkeypatch.setattr(bwrap_backend, "pid1_fd", killed_first)
    before = _children()
    with pytest.raises(pysandbox.SetupError) as got:
        pysandbox.run(argv, policy=_policy(tmp_path), backend="bwrap")
    assert got.value.reason == pysandbox.Reason.SETUP_FAILED
    assert "before its init reported" in str(got.value), got.value
    assert not marker.exists()
    assert _children() - before == set()
