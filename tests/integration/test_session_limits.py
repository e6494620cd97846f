"""Resource limits in sessions, pools and asyncio sessions, both backends
(pysandbox/session_limits.py, native/psb_session_limits.h; README "Resource limits").

The session's memory and pids limits are its whole budget (its cgroups, or the pids
limit as RLIMIT_NPROC where no cgroup can hold it: pysandbox/nproc.py); its rlimits and
wall time bind each command, never the server; a command may narrow them. Every claim
has a live control: the same command where the limit does not apply does what the
limit stops, or the allowed case in the same session passes (the session lives on).
As an unprivileged user without a delegated cgroup, a memory limit fails closed: that
is the asserted result there, not a skip.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import sys
import textwrap
import types

import pytest

import pysandbox
from pysandbox import Limits, LimitUnavailable, Policy, PolicyError, Reason, SetupError
from pysandbox import nproc
from pysandbox import session_proto as W
from pysandbox.cgroup import host_support
from pysandbox.session_limits import limits_frame, mark_limited
from tests.integration.test_limits import ESCAPE, FORK_BOMB, HOG   # the bomb holds its children until stdin ends

FAIL_CLOSED = ("controller_not_delegated", "cgroup_unavailable")

def _py(source: str) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", textwrap.dedent(source)]


def _policy(tmp_path, **limits) -> Policy:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Policy.default(workdir=work, limits=Limits(**limits) if limits else None)


def _memory_or_fail_closed(tmp_path, backend) -> bool:
    """True when a memory cgroup can be made here; else the session fails closed with its
    reason (asserted) and False. As root, a host that cannot is a missing capability."""
    ok, reason, detail = host_support("memory")
    if ok:
        return True
    if os.geteuid() == 0:
        pytest.skip(f"cgroup memory: {reason}: {detail}")
    with pytest.raises(LimitUnavailable) as info:
        pysandbox.Sandbox(_policy(tmp_path, memory="64M"), backend=backend)
    assert info.value.reason.value in FAIL_CLOSED and info.value.limit == "memory"
    return False


def _pids_mechanism() -> str | None:
    if host_support("pids")[0]:
        return "cgroup"
    return "nproc" if nproc.available()[0] else None


def test_a_memory_hog_is_killed_and_reported_and_the_session_lives_on(backend, tmp_path):
    if not _memory_or_fail_closed(tmp_path, backend):
        return
    with pysandbox.Sandbox(_policy(tmp_path, memory="64M"), backend=backend) as sb:
        hog = sb.run(_py(HOG.format(mib=256)), capture_output=True, timeout=120)
        assert hog.returncode == -signal.SIGKILL and b"survived" not in hog.stdout, hog
        assert hog.limit == "memory"
        small = sb.run(_py(HOG.format(mib=16)), capture_output=True, timeout=120)   # control: same session
        assert small.returncode == 0 and b"survived" in small.stdout and small.limit is None
    # live control: the hog survives a session without the limit
    with pysandbox.Sandbox(_policy(tmp_path), backend=backend) as sb:
        free = sb.run(_py(HOG.format(mib=96)), capture_output=True, timeout=120)
        assert free.returncode == 0 and b"survived" in free.stdout and free.limit is None


def test_a_fork_bomb_is_bounded_by_the_sessions_pids_limit(backend, tmp_path):
    how = _pids_mechanism()
    if how is None:
        with pytest.raises(LimitUnavailable) as info:
            pysandbox.Sandbox(_policy(tmp_path, pids=48), backend=backend)
        assert info.value.reason.value in FAIL_CLOSED
        return
    with pysandbox.Sandbox(_policy(tmp_path, pids=48), backend=backend) as sb:
        bomb = sb.run(_py(FORK_BOMB.format(tries=2000)), input="", capture_output=True, text=True, timeout=120)
        made, refused = map(int, bomb.stdout.split())
        assert made < 48 and refused > 0, bomb
        if how == "cgroup":
            assert bomb.limit == "pids"   # RLIMIT_NPROC counts no refused fork: nothing to report
        few = sb.run(_py(FORK_BOMB.format(tries=10)), input="", capture_output=True, text=True, timeout=120)
        assert few.stdout.split() == ["10", "0"] and few.limit is None   # control: the session lives on
    with pysandbox.Sandbox(_policy(tmp_path), backend=backend) as sb:   # live control: no limit
        free = sb.run(_py(FORK_BOMB.format(tries=100)), input="", capture_output=True, text=True, timeout=120)
        assert free.stdout.split() == ["100", "0"] and free.limit is None


LIMITS_OF = "grep -E '^Max (cpu time|open files|file size|processes) ' /proc/{}/limits"


def _limits_of(sb, who: str) -> dict:
    done = sb.run(["sh", "-c", LIMITS_OF.format(who)], capture_output=True, text=True, check=True)
    return {" ".join(line.split()[1:3]): line.split()[3] for line in done.stdout.splitlines()}


def test_rlimits_bind_each_command_and_never_the_server_or_its_keeper(backend, tmp_path):
    with pysandbox.Sandbox(_policy(tmp_path, cpu_time=50, open_files=64, file_size="1M"), backend=backend) as sb:
        mine = _limits_of(sb, "self")
        assert (mine["cpu time"], mine["open files"], mine["file size"]) == ("50", "64", str(1 << 20)), mine
        for other in ("1", "$PPID"):   # the server (pid 1), the command's keeper
            theirs = _limits_of(sb, other)
            assert theirs["cpu time"] == "unlimited" and theirs["open files"] != "64", (other, theirs)


def test_a_command_narrows_the_sessions_limits_and_never_widens_them(backend, tmp_path):
    with pysandbox.Sandbox(_policy(tmp_path, cpu_time=50, open_files=64), backend=backend) as sb:
        narrow = _limits_of_with(sb, Limits(cpu_time=5, open_files=32))
        assert (narrow["cpu time"], narrow["open files"]) == ("5", "32"), narrow
        wide = _limits_of_with(sb, Limits(cpu_time=500, open_files=4096))
        assert (wide["cpu time"], wide["open files"]) == ("50", "64"), wide   # never widened
    with pysandbox.Sandbox(_policy(tmp_path), backend=backend) as sb:   # a session without limits
        own = _limits_of_with(sb, Limits(file_size="64K"))
        assert own["file size"] == str(64 << 10)
        big = sb.run(["sh", "-c", "exec head -c 131072 /dev/zero > /tmp/big"], limits=Limits(file_size="64K"))
        assert big.returncode == -signal.SIGXFSZ and big.limit == "file_size"
        ok = sb.run(["sh", "-c", "exec head -c 131072 /dev/zero > /tmp/big"])   # control: no limit
        assert ok.returncode == 0 and ok.limit is None


def _limits_of_with(sb, limits) -> dict:
    done = sb.run(["sh", "-c", LIMITS_OF.format("self")], capture_output=True, text=True, check=True, limits=limits)
    return {" ".join(line.split()[1:3]): line.split()[3] for line in done.stdout.splitlines()}


def test_wall_time_ends_one_command_and_the_session_lives_on(backend, tmp_path):
    with pysandbox.Sandbox(_policy(tmp_path, wall_time=60), backend=backend) as sb:
        late = sb.run(["sh", "-c", "sleep 60 & exec sleep 60"], limits=Limits(wall_time=0.5), timeout=120)
        assert late.returncode == -signal.SIGKILL and late.limit == "wall_time"
        gone = sb.run(["sh", "-c", "ps -e -o comm= | grep -c '^sleep' || true"], capture_output=True, text=True)
        assert gone.stdout.strip() == "0"   # its whole tree ended with it
        done = sb.run(["true"], limits=Limits(wall_time=30))   # control: in time, same session
        assert done.returncode == 0 and done.limit is None
        cpu = sb.run(["sh", "-c", "while :; do :; done"], limits=Limits(cpu_time=1), timeout=120)
        assert cpu.returncode == -signal.SIGXCPU and cpu.limit == "cpu_time"


def _nests(kind) -> bool:
    """Whether a session command can have its own ``kind`` cgroup here (cgroup v1, a
    launcher that can make one); v2 and no cgroup at all fail closed (asserted below)."""
    from pysandbox.cgroup import locate
    return host_support(kind)[0] and locate(kind)[0] == 1


def test_a_commands_own_memory_limit_is_a_cgroup_of_its_own(backend, tmp_path):
    if not _nests("memory"):
        return _own_limit_fails_closed(backend, tmp_path, Limits(memory="64M"))
    with pysandbox.Sandbox(_policy(tmp_path, memory="256M"), backend=backend) as sb:
        hog = sb.run(_py(HOG.format(mib=96)), capture_output=True, timeout=120, limits=Limits(memory="64M"))
        assert hog.returncode == -signal.SIGKILL and b"survived" not in hog.stdout and hog.limit == "memory", hog
        same = sb.run(_py(HOG.format(mib=96)), capture_output=True, timeout=120)   # control: the session allows it
        assert same.returncode == 0 and b"survived" in same.stdout and same.limit is None
        groups = [g.path for g in sb._server.cgroups.groups]
        assert not [e for g in groups for e in os.listdir(g) if e.startswith("cmd-")]   # each one removed


def test_a_commands_own_pids_limit_bounds_its_fork_bomb(backend, tmp_path):
    if not _nests("pids"):
        return _own_limit_fails_closed(backend, tmp_path, Limits(pids=16))
    with pysandbox.Sandbox(_policy(tmp_path, pids=200), backend=backend) as sb:
        bomb = sb.run(_py(FORK_BOMB.format(tries=2000)), input="", capture_output=True, text=True, timeout=120,
                      limits=Limits(pids=16))
        made, refused = map(int, bomb.stdout.split())
        assert made < 16 and refused > 0 and bomb.limit == "pids", bomb
        free = sb.run(_py(FORK_BOMB.format(tries=100)), input="", capture_output=True, text=True, timeout=120)
        assert free.stdout.split() == ["100", "0"] and free.limit is None   # control: the session's 200
        wide = sb.run(_py(FORK_BOMB.format(tries=2000)), input="", capture_output=True, text=True, timeout=120,
                      limits=Limits(pids=5000))   # never widened: the session's 200 holds
        made, refused = map(int, wide.stdout.split())
        assert made < 200 and refused > 0, wide


def test_root_in_its_own_cgroup_cannot_move_to_the_sessions(backend, tmp_path):
    if not _nests("pids"):
        pytest.skip("not applicable here: no per-command cgroup (the fail-closed tests run)")
    with pysandbox.Sandbox(_policy(tmp_path, pids=64).replace(uid=0, gid=0), backend=backend) as sb:
        done = sb.run(_py(ESCAPE), capture_output=True, timeout=60, limits=Limits(pids=32))
        tried, moved, still = done.stdout.split()
        assert int(tried) >= 2 and moved == b"False" and int(still) >= 1, done
        mine = sb.run(["cat", "/proc/self/cgroup"], capture_output=True, text=True, limits=Limits(pids=32))
        assert "/cmd-" in mine.stdout   # control: it was in its own, below the session's


def _own_limit_fails_closed(backend, tmp_path, limits):
    with pysandbox.Sandbox(_policy(tmp_path), backend=backend) as sb:   # no session cgroup to nest in
        with pytest.raises(LimitUnavailable) as info:
            sb.run(["true"], limits=limits)
        assert info.value.reason.value == "cgroup_unavailable"
        assert sb.run(["true"], limits=Limits(cpu_time=5)).returncode == 0   # control: the session lives on


def test_limits_must_be_a_limits(backend, tmp_path):
    with pysandbox.Sandbox(_policy(tmp_path), backend=backend) as sb:
        with pytest.raises(PolicyError) as info:
            sb.run(["true"], limits={"cpu_time": 1})
        assert info.value.reason is Reason.INVALID_VALUE
        assert sb.run(["true"], limits=Limits(cpu_time=1)).returncode == 0   # control


def test_an_rlimit_the_kernel_refuses_is_named_as_on_a_one_shot_launch(backend, tmp_path):
    policy = _policy(tmp_path)
    marker = tmp_path / "work" / "ran"
    with pysandbox.Sandbox(policy, backend=backend) as sb:
        with pytest.raises(SetupError) as info:
            sb.run(["touch", str(marker)], limits=Limits(open_files=1 << 30))   # above fs.nr_open
        assert info.value.stage == "rlimit" and info.value.filename == "RLIMIT_NOFILE" and not marker.exists()
        sb.run(["touch", str(marker)], limits=Limits(open_files=64), check=True)   # control
        assert marker.exists()


def test_a_spawn_marked_limited_without_its_limits_frame_never_runs(backend, tmp_path):
    """The server's side fails closed: a SPAWN marked SPAWN_LIMITED whose LIMITS frame is
    missing, malformed or another command's is refused (RLIMIT, EINVAL), nothing runs."""
    marker = tmp_path / "work" / "ran"

    def attempt(sb, before):
        ch = sb.channel
        cid = next(ch.ids)
        frame = W.spawn_frame(cid, "/", ["/bin/touch", "/usr/bin/touch"], ["touch", str(marker)], {}, [])
        cmd = types.SimpleNamespace(pid=None, failed=None, status=None, limits=None,   # what the channel fills in
                                    ended=lambda returncode=None: None)
        with ch.cv:
            ch.commands[cid] = cmd
        ch.send(mark_limited(frame), before=before(cid))
        ch.wait_for(lambda: cmd.failed is not None or cmd.status is not None, 60)
        return cmd

    with pysandbox.Sandbox(_policy(tmp_path), backend=backend) as sb:
        for before in (lambda cid: b"",                                     # none
                       lambda cid: limits_frame(cid + 1000, ()),            # another command's
                       lambda cid: struct.pack("<8I", W.MAGIC, 3, cid, 5, 0, 0, 0, 0)):   # malformed: 5, none sent
            cmd = attempt(sb, before)
            assert cmd.failed is not None and cmd.failed.a == 22 and not marker.exists(), cmd.failed
        ok = attempt(sb, lambda cid: limits_frame(cid, Limits(cpu_time=5).rlimits()))   # control
        assert ok.failed is None and ok.status == 0 and marker.exists()


def test_root_in_a_session_cannot_leave_the_sessions_cgroup(backend, tmp_path):
    if not host_support("pids")[0]:
        pytest.skip("not applicable here: no pids cgroup for this launcher (the fail-closed tests run)")
    policy = _policy(tmp_path, pids=64).replace(uid=0, gid=0)
    with pysandbox.Sandbox(policy, backend=backend) as sb:
        groups = [g.path for g in sb._server.cgroups.groups]
        done = sb.run(_py(ESCAPE), capture_output=True, timeout=60)
        tried, moved, still = done.stdout.split()
        assert int(tried) >= 2 and moved == b"False" and int(still) >= 1, done
        inside = [int(p) for g in groups for p in open(os.path.join(g, "cgroup.procs")).read().split()]
        assert len(inside) >= 1   # the server is still there
        # live control: the launcher (the host's side) can move a process of the session out
        target = os.path.join(os.path.dirname(groups[0]), "cgroup.procs")
        with open(target, "w") as f:
            f.write(str(inside[0]))
        assert inside[0] not in [int(p) for p in open(os.path.join(groups[0], "cgroup.procs")).read().split()]


def test_a_pool_carries_its_policys_limits(backend, tmp_path):
    limits = {"file_size": "64K", "wall_time": 30}
    memory = host_support("memory")[0]
    if memory:
        limits["memory"] = "64M"
    with pysandbox.Pool(_policy(tmp_path, **limits), size=1, backend=backend) as pool:
        big = pool.run(["sh", "-c", "exec head -c 131072 /dev/zero > /tmp/big"])
        assert big.returncode == -signal.SIGXFSZ and big.limit == "file_size"
        late = pool.run(["sleep", "60"], limits=Limits(wall_time=0.5), timeout=120)
        assert late.returncode == -signal.SIGKILL and late.limit == "wall_time"
        if memory:
            hog = pool.run(_py(HOG.format(mib=256)), capture_output=True, timeout=120)
            assert hog.returncode == -signal.SIGKILL and hog.limit == "memory"
        ok = pool.run(["sh", "-c", "exec head -c 32768 /dev/zero > /tmp/small"])   # control
        assert ok.returncode == 0 and ok.limit is None
    if not memory and os.geteuid() != 0:
        with pytest.raises(LimitUnavailable):   # fail closed: the refill's error reaches the caller
            with pysandbox.Pool(_policy(tmp_path, memory="64M"), size=1, backend=backend) as pool:
                pool.run(["true"])


def test_an_asyncio_session_reports_each_commands_limit(backend, tmp_path):
    from pysandbox.aio_session import Sandbox as AioSandbox

    async def main():
        async with AioSandbox(_policy(tmp_path, file_size="64K"), backend=backend) as sb:
            big = await sb.run(["sh", "-c", "exec head -c 131072 /dev/zero > /tmp/big"])
            late = await sb.run(["sleep", "60"], limits=Limits(wall_time=0.5), timeout=120)
            ok = await sb.run(["sh", "-c", "exec head -c 32768 /dev/zero > /tmp/small"])
            return big, late, ok
    big, late, ok = asyncio.run(main())
    assert big.returncode == -signal.SIGXFSZ and big.limit == "file_size"
    assert late.returncode == -signal.SIGKILL and late.limit == "wall_time"
    assert ok.returncode == 0 and ok.limit is None   # control, same session


def test_pids_as_rlimit_nproc_bounds_the_sandbox_not_the_callers_processes(backend, tmp_path, monkeypatch):
    """Where no cgroup can hold the pids limit (forced here: an empty cgroup root) and the
    kernel counts RLIMIT_NPROC per user namespace, the limit bounds a fork bomb in the
    sandbox while the caller holds more processes of the same uid than the limit
    outside: those are not counted, and the caller still forks while the bomb is held."""
    ok, why = nproc.available()
    if not ok:
        pytest.skip(f"not applicable here: {why}")
    monkeypatch.setenv("PYSANDBOX_CGROUP_ROOT", str(tmp_path))   # no hierarchy: cgroup_unavailable
    outside = [subprocess.Popen(["sleep", "120"]) for _ in range(24)]   # more than the limit, same uid
    try:
        for run in (lambda argv: pysandbox.run(argv, policy=_policy(tmp_path, pids=16), backend=backend,
                                               input="", capture_output=True, text=True, timeout=120),
                    lambda argv: _in_session(_policy(tmp_path, pids=16), backend, argv)):
            bomb = run(_py(FORK_BOMB.format(tries=2000)))
            made, refused = map(int, bomb.stdout.split())
            assert 0 < made < 16 and refused > 0, bomb
            assert all(p.poll() is None for p in outside)   # the caller's processes live on
            control = subprocess.run(["true"], timeout=60)   # and the caller still forks
            assert control.returncode == 0
        # live control: the same bomb, without the limit, makes every fork
        free = pysandbox.run(_py(FORK_BOMB.format(tries=100)), policy=_policy(tmp_path), backend=backend,
                             input="", capture_output=True, text=True, timeout=120)
        assert free.stdout.split() == ["100", "0"]
    finally:
        for p in outside:
            p.kill()
            p.wait()
    from pysandbox.enforcement import host_limits
    assert host_limits()["pids"]["mechanism"] == nproc.MECHANISM   # what status reports


def _in_session(policy, backend, argv):
    with pysandbox.Sandbox(policy, backend=backend) as sb:
        return sb.run(argv, input="", capture_output=True, text=True, timeout=120)


def _holding_cgroup_procs(pid: int) -> list[str]:
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.endswith("/cgroup.procs"):
                out.append(target)
    except OSError:
        pass
    return out


def test_only_the_commands_process_ever_holds_its_cgroup_procs(backend, tmp_path):
    """The descriptor that moves a command into its own cgroup is written and closed by
    the command's process before its exec: while the command runs, no process of the
    session (server, keeper, command) holds a cgroup.procs. Live control: the scan finds
    one this test opens itself."""
    if not _nests("pids"):
        pytest.skip("not applicable here: no per-command cgroup (the fail-closed tests run)")
    with pysandbox.Sandbox(_policy(tmp_path, pids=64), backend=backend) as sb:
        proc = sb.Popen(["sleep", "30"], limits=Limits(pids=8))
        try:
            session = [g.path for g in sb._server.cgroups.groups]
            mine = [os.path.join(g, e) for g in session for e in os.listdir(g) if e.startswith("cmd-")]
            pids = {int(p) for d in session + mine for p in open(os.path.join(d, "cgroup.procs")).read().split()}
            assert len(pids) >= 3   # the server, the keeper, the command (and the sandbox's init)
            assert {p: _holding_cgroup_procs(p) for p in pids if _holding_cgroup_procs(p)} == {}
        finally:
            proc.kill()
            proc.wait()
        with open(os.path.join(session[0], "cgroup.procs")) as held:   # live control
            assert _holding_cgroup_procs(os.getpid()) and held
