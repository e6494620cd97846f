"""The armed keeper: a session's server forks the next command's keeper while it waits
(native/psb_session.c, arm; docs/ARCHITECTURE.md, "Sessions"), only when no command
runs and no orphan of one is left. What a hostile command could want of it, tried:

1. Meet it: stop or trace the keeper that will start the *next* command, so one command
   holds another (it would, on a kernel without Landlock's signal scope). A command
   sees no keeper but its own, with and without the Landlock domain; the live control is
   a command started while another runs, which sees both keepers.
2. Hand it a frame it cannot take whole at once (a large environment): the SPAWN takes
   the fork path, with every byte, and the next command is armed again.
3. Lose it (an armed keeper killed from outside, as the session's memory limit could):
   another is armed, at most ARM_LOST_MAX times, then every keeper is forked for its
   SPAWN; no command fails for it. A stopped armed keeper holds its command only until
   the command's timeout, and the session lives on.

Whether a command started under an armed keeper is read off start times: an armed
keeper was forked when the last command ended, a forked one at its own command's SPAWN.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time

import pytest

import pysandbox
from pysandbox.session import Sandbox
from tests.support import wait_until

pytestmark = pytest.mark.requires("userns")

# The server's children (keepers), the command's keeper, and the keeper's and the
# command's start times (clock ticks since boot).
PROBE = ("cat /proc/1/task/1/children; echo; echo $PPID; "
         "cut -d' ' -f22 /proc/$PPID/stat; cut -d' ' -f22 /proc/self/stat")
IDLE = 0.6   # seconds between two commands: an armed keeper is older than its command by this
TICKS = os.sysconf("SC_CLK_TCK")


def _probe(sb, **kw) -> dict:
    done = sb.run(["sh", "-c", PROBE + "; printf %s \"$B0$B1$B2$B3$B4$B5$B6$B7\" | wc -c"], capture_output=True,
                  text=True, timeout=60, **kw)
    assert done.returncode == 0, done.stderr
    kids, keeper, kstart, own, big = done.stdout.split("\n")[:5]
    return {"keepers": [int(k) for k in kids.split()], "keeper": int(keeper),
            "armed": int(own) - int(kstart) >= IDLE / 2 * TICKS, "big": int(big)}


def _after_idle(sb, **kw) -> dict:
    sb.run(["true"], timeout=60)
    time.sleep(IDLE)
    return _probe(sb, **kw)


@pytest.mark.parametrize("landlock", ["domain", "no_landlock"])
def test_a_command_meets_no_keeper_but_its_own(backend, tmp_path, monkeypatch, landlock):
    if landlock == "no_landlock":
        monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")   # where a command could signal a keeper
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        alone = _after_idle(sb)
        other = sb.Popen(["sleep", "60"])
        try:
            beside = _probe(sb)
        finally:
            other.kill()
            other.wait(timeout=30)
        after = _after_idle(sb)
    assert alone["armed"] and after["armed"], (alone, after)   # it started under the armed one
    assert alone["keepers"] == [alone["keeper"]], alone
    assert after["keepers"] == [after["keeper"]], after
    # live control: a command started while another runs sees that one's keeper too (and
    # its own was forked for it: nothing is armed while a command runs)
    assert len(beside["keepers"]) == 2 and beside["keeper"] in beside["keepers"], beside
    assert not beside["armed"], beside


def test_a_frame_too_large_for_the_armed_keeper_takes_the_fork_path_whole(backend, tmp_path):
    # more than a unix socket takes at once (each string under the kernel's 128 KiB)
    big = {f"B{i}": chr(ord("a") + i) * 80_000 for i in range(8)}
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        small = _after_idle(sb, env={**os.environ, "B0": "y"})
        large = _after_idle(sb, env={**os.environ, **big})
        again = _after_idle(sb)
    assert small["armed"] and small["big"] == 1, small   # the control: the armed path
    assert not large["armed"] and large["big"] == 640_000, large
    assert again["armed"], again


def _children(pid: int) -> list[str]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return f.read().split()


def _server_pid(sb) -> int:
    """The server's host pid: the launched process (native), or bwrap's child: the one
    that is pid 1 in its namespace."""
    pid = sb._server.pid
    for _ in range(3):
        with open(f"/proc/{pid}/status") as f:
            nspid = next(line for line in f if line.startswith("NSpid:")).split()
        if nspid[-1] == "1":
            return pid
        pid = int(_children(pid)[0])
    raise AssertionError("no pid 1 below the session's process")


def _armed_pid(sb) -> int:
    """The armed keeper's host pid: the server's one child while no command runs, once it
    waits in recvmsg for its SPAWN (the last command's keeper may still be exiting: the
    launcher has its end first)."""
    pid = _server_pid(sb)
    kids: list = []

    def armed() -> bool:
        kids[:] = _children(pid)
        try:
            with open(f"/proc/{kids[0]}/syscall") as f:
                return len(kids) == 1 and f.read().split()[0] == "47"   # __NR_recvmsg
        except (IndexError, FileNotFoundError, ProcessLookupError):
            return False

    assert wait_until(armed, 30), kids
    return int(kids[0])


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(line for line in f if line.startswith("State:")).split("(")[1].rstrip(")\n")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def test_a_lost_armed_keeper_is_replaced_then_the_fork_path_runs(backend, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("not applicable here: the test signals the session's keeper from outside (root)")
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        sb.run(["true"], timeout=60)
        for _ in range(3):   # ARM_LOST_MAX in native/psb_session.c
            pid = _armed_pid(sb)
            os.kill(pid, signal.SIGKILL)
            assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 30)   # control: it landed
        after = [_after_idle(sb) for _ in range(2)]
        assert sb.run(["echo", "ok"], capture_output=True, text=True, timeout=60).stdout == "ok\n"
        server = _server_pid(sb)
        assert wait_until(lambda: _children(server) == [], 30), _children(server)   # none armed any more
    assert not any(p["armed"] for p in after), after


def test_a_stopped_armed_keeper_holds_its_command_only_until_its_timeout(backend, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("not applicable here: the test signals the session's keeper from outside (root)")
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        sb.run(["true"], timeout=60)
        pid = _armed_pid(sb)
        os.kill(pid, signal.SIGSTOP)
        assert wait_until(lambda: "stopped" in _state(pid), 30), _state(pid)   # control: it landed
        t0 = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            sb.run(["echo", "held"], capture_output=True, timeout=1, kill_grace=0.2)
        assert time.monotonic() - t0 < 30
        assert wait_until(lambda: _state(pid) in ("", "zombie"), 30), _state(pid)   # the server ended it
        assert sb.run(["echo", "ok"], capture_output=True, text=True, timeout=60).stdout == "ok\n"


def _refuse_socketpair() -> bytes:
    """A caller's seccomp program: socketpair (x86_64: 53) fails with EPERM, all else runs."""
    insns = [(0x20, 0, 0, 0),               # ld [nr]
             (0x15, 0, 1, 53),              # jeq socketpair
             (0x06, 0, 0, 0x00050000 | 1),  # ret ERRNO(EPERM)
             (0x06, 0, 0, 0x7FFF0000)]      # ret ALLOW
    return b"".join(struct.pack("<HBBI", *i) for i in insns)


def test_a_server_refused_socketpair_takes_the_fork_path(backend, tmp_path):
    """README, seccomp: a caller's program that refuses what arming needs costs each
    command the fork path, nothing else. Control: the same session without it arms."""
    policy = pysandbox.Policy.default(workdir=tmp_path)
    with Sandbox(policy.replace(seccomp=(_refuse_socketpair(),)), backend) as sb:
        refused = [_after_idle(sb) for _ in range(2)]
        probe = sb.run([sys.executable, "-I", "-c", "import socket; socket.socketpair()"], capture_output=True,
                       text=True, timeout=60)
    with Sandbox(policy, backend) as sb:
        control = _after_idle(sb)
    assert "PermissionError" in probe.stderr, probe   # the program is loaded: it binds commands too
    assert not any(p["armed"] for p in refused), refused
    assert control["armed"], control
