"""Denials per command in sessions and pools, and in the Deep Agents backend's output
(pysandbox/denials.py, issue 32), on both backends: each command's result carries what
was refused to its own processes; the next command, allowed, carries none (the control);
a descendant that makes a session of its own is not counted on the command (it cannot
put its refusals on another one) but stays in the session's record.
"""

from __future__ import annotations

import errno
import sys

import pytest

import pysandbox
from pysandbox.pool import Pool
from pysandbox.session import Sandbox

pytestmark = pytest.mark.requires("userns")

KEYCTL = [sys.executable, "-I", "-c", "import ctypes; ctypes.CDLL(None).syscall(250, 0, 0, 0, 0)"]


def test_each_command_carries_its_own(backend, tmp_path):
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
    with Sandbox(policy=pol, backend=backend) as sb:
        first = sb.run(["sh", "-c", "touch /etc/psb-s1; mkdir /usr/psb-s1"], capture_output=True, timeout=60)
        syscall = sb.run(KEYCTL, capture_output=True, timeout=60)
        allowed = sb.run(["sh", "-c", "touch made-here && mkdir made-dir"], capture_output=True, timeout=60)
        escaped = sb.run(["sh", "-c", "setsid sh -c 'touch /etc/psb-own-session'; touch /etc/psb-s3"],
                         capture_output=True, timeout=60)
        regrouped = sb.run(["sh", "-c", "\"$0\" -I -c \"import os; os.setpgid(0, 0); open('/etc/psb-own-group', 'w')\"; "
                            "touch /etc/psb-s4", sys.executable], capture_output=True, timeout=60)
        session_rest = sb.denials
    assert first.returncode == 1
    assert {d.target for d in first.denials} == {"/etc/psb-s1", "/usr/psb-s1"}
    assert all(d.kind == "write" and d.errno == errno.EROFS for d in first.denials)
    assert [(d.kind, d.target) for d in syscall.denials] == [("syscall", "keyctl")]
    assert allowed.returncode == 0 and list(allowed.denials) == []
    assert (tmp_path / "made-here").exists() and (tmp_path / "made-dir").is_dir()
    assert [d.target for d in escaped.denials] == ["/etc/psb-s3"]
    # a process group of its own is still the command's session: its records stay on the command
    assert sorted(d.target for d in regrouped.denials) == ["/etc/psb-own-group", "/etc/psb-s4"]
    assert "/etc/psb-own-session" in {d.target for d in session_rest}
    assert "/etc/psb-own-group" not in {d.target for d in session_rest}
    assert "/etc/psb-s1" not in {d.target for d in session_rest}   # taken by its command


def test_a_pool_command_carries_its_own(backend, tmp_path):
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
    with Pool(pol, size=1, backend=backend) as pool:
        refused = pool.run(["sh", "-c", "touch /etc/psb-pool"], capture_output=True, timeout=60)
        allowed = pool.run(["sh", "-c", "touch ok"], capture_output=True, timeout=60)
    assert [d.target for d in refused.denials] == ["/etc/psb-pool"]
    assert list(allowed.denials) == []


def test_without_the_option_no_record_and_the_same_refusal(backend, tmp_path):
    with Sandbox(policy=pysandbox.Policy.default(workdir=tmp_path), backend=backend) as sb:
        done = sb.run(["sh", "-c", "touch /etc/psb-off"], capture_output=True, timeout=60)
        assert sb.denials is None
    assert done.returncode == 1 and done.denials is None and b"Read-only file system" in done.stderr


def test_deep_agents_output_names_what_was_refused_when_the_command_failed(backend, tmp_path):
    pytest.importorskip("deepagents")
    from pysandbox.integrations.deepagents import PysandboxSandbox
    sb = PysandboxSandbox(policy=pysandbox.Policy.default(workdir=tmp_path, report_denials=True), backend=backend)
    try:
        failed = sb.execute("echo x > /etc/hosts")
        refused_ok = sb.execute("touch /etc/psb-da || true")      # refused, but the command succeeded
        plain_fail = sb.execute("exit 3")                          # failed, nothing refused
    finally:
        sb.close()
    assert failed.exit_code != 0
    assert failed.output.splitlines()[-1] == "pysandbox: denied: write /etc/hosts (EROFS)"
    assert "pysandbox: denied" not in refused_ok.output and refused_ok.exit_code == 0
    assert plain_fail.exit_code == 3 and "pysandbox: denied" not in plain_fail.output


def test_an_asyncio_session_command_carries_its_own(backend, tmp_path):
    import asyncio
    from pysandbox.aio_session import Sandbox as AioSandbox

    async def main():
        pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
        async with AioSandbox(policy=pol, backend=backend) as sb:
            refused = await sb.run(["sh", "-c", "touch /etc/psb-aio-session"], capture_output=True, timeout=60)
            allowed = await sb.run(["sh", "-c", "touch ok"], capture_output=True, timeout=60)
        return refused, allowed
    refused, allowed = asyncio.run(main())
    assert [d.target for d in refused.denials] == ["/etc/psb-aio-session"]
    assert list(allowed.denials) == []


def test_an_asyncio_session_waits_for_the_records_off_the_loop(backend, tmp_path, monkeypatch):
    # A command's records may take a while to be complete (its observer catching up):
    # that wait must run off the event loop, which keeps serving other tasks meanwhile.
    # The wait is made long here (0.5 s); a ticker counts the loop's turns during it. The
    # control: the same wait made on the loop's thread (the old behaviour) lets no tick in.
    import asyncio
    import time

    from pysandbox.aio_session import Sandbox as AioSandbox
    from pysandbox.session import SessionProcess

    settle = SessionProcess._settle

    def slow_settle(self):
        time.sleep(0.5)
        settle(self)
    monkeypatch.setattr(SessionProcess, "_settle", slow_settle)

    async def ticks_during(work) -> tuple[int, object]:
        count = 0

        async def tick():
            nonlocal count
            while True:
                await asyncio.sleep(0.01)
                count += 1
        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0.05)
        start = count
        try:
            out = await work()
        finally:
            ticker.cancel()
        return count - start, out

    async def main():
        pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
        async with AioSandbox(policy=pol, backend=backend) as sb:
            ticks, done = await ticks_during(
                lambda: sb.run(["sh", "-c", "touch /etc/psb-aio-loop"], capture_output=True, timeout=60))
            proc = await sb.create_subprocess_exec("true")
            await asyncio.shield(proc._exit)     # ended, its records not yet read

            async def on_the_loop():
                return proc._popen.settle()
            control, _ = await ticks_during(on_the_loop)
        return ticks, done, control
    ticks, done, control = asyncio.run(main())
    assert [d.target for d in done.denials] == ["/etc/psb-aio-loop"]
    assert ticks >= 10, ticks          # the loop turned while the records settled
    assert control <= 1, control       # control: the same wait on the loop's thread blocks it
