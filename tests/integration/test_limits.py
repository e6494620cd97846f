"""Resource limits on real sandboxes, both backends (README "Resource limits",
docs/ARCHITECTURE.md invariant 14).

Memory and pids limits need a cgroup below the launcher's own. As root on a cgroup v1 or
v2 host the launcher can make one; as an unprivileged user without a delegated subtree it
cannot, and then the expected result is the launch failing closed with its reason
(``controller_not_delegated`` or ``cgroup_unavailable``): each positive test asserts that
instead (it is not a skip). Every claim has a live control: the same command without the
limit does what the limit stops. Memory tests use a 64M limit and a bounded allocation;
fork tests a bounded loop; every check reads only the cgroups this test's launch made.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import pysandbox
from pysandbox import Limits, LimitUnavailable, Policy
from pysandbox import nproc
from pysandbox.cgroup import host_support
from pysandbox.enforcement import host_limits
from tests.support import need, not_applicable

FAIL_CLOSED = ("controller_not_delegated", "cgroup_unavailable")


def _policy(**limits) -> Policy:
    return Policy.default(limits=Limits(**limits) if limits else None)


def _py(source: str) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", textwrap.dedent(source)]


def cgroup_or_fail_closed(kind: str, backend: str) -> bool:
    """True when this launcher can make a ``kind`` cgroup here. Else, as an unprivileged
    user, assert the launch fails closed with its reason (the expected result) and return
    False; as root, a host that cannot is a missing capability (need)."""
    ok, reason, detail = host_support(kind)
    if ok:
        return True
    if os.geteuid() == 0:
        need(f"cgroup {kind}", f"{reason}: {detail}")
    if kind == "pids" and nproc.available()[0]:
        # no cgroup, and RLIMIT_NPROC holds the limit instead (pysandbox/nproc.py; its
        # fork bomb: tests/integration/test_session_limits.py): the launch runs
        done = pysandbox.run(["true"], policy=_policy(pids=64), backend=backend)
        assert done.returncode == 0 and host_limits()["pids"]["mechanism"] == nproc.MECHANISM
        return False
    with pytest.raises(LimitUnavailable) as info:
        pysandbox.run(["true"], policy=_policy(**{kind: 64 << 20 if kind == "memory" else 64}), backend=backend)
    assert info.value.reason.value in FAIL_CLOSED and info.value.limit == kind
    return False


FORK_BOMB = """
    import os, sys
    r, w = os.pipe()
    made = refused = 0
    for _ in range({tries}):                    # bounded: never more than {tries} forks
        try:
            pid = os.fork()
        except BlockingIOError:                 # EAGAIN: the pids limit
            refused += 1
            if refused >= 20:
                break
            continue
        if pid == 0:
            os.close(w)
            os.read(r, 1)                       # hold until the parent ends
            os._exit(0)
        made += 1
    print(made, refused, flush=True)
    sys.stdin.read()                            # until the test has looked
"""


def _bomb(backend: str, tries: int, **limits):
    proc = pysandbox.Popen(_py(FORK_BOMB.format(tries=tries)), policy=_policy(**limits), backend=backend,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc


def test_fork_bomb_is_contained_at_the_pids_limit(backend):
    if not cgroup_or_fail_closed("pids", backend):
        return
    limit = 48
    proc = _bomb(backend, 2000, pids=limit)
    try:
        groups = [g.path for g in proc._child.cgroups.groups]
        made, refused = map(int, proc.stdout.readline().split())
        pids_dir = next(g for g in groups if os.path.exists(os.path.join(g, "pids.max")))
        with open(os.path.join(pids_dir, "pids.current")) as f:
            current = int(f.read())
        assert made < limit and refused > 0 and current <= limit, (made, refused, current)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert proc.limit == "pids"
    # the count of processes in our cgroup recovered: the cgroup is gone with its processes
    assert not any(os.path.exists(g) for g in groups)
    # live control: the same bomb, bounded at 100, makes every fork without the limit
    control = _bomb(backend, 100)
    try:
        made, refused = map(int, control.stdout.readline().split())
        control.stdin.close()
        control.wait(timeout=60)
    finally:
        control.kill()
        control.wait()
    assert (made, refused) == (100, 0) and control.limit is None


HOG = """
    chunks = []
    for i in range({mib} // 8):                 # bounded: at most {mib} MiB
        chunks.append(bytearray(8 << 20))       # zero-filled: every page touched
    print("survived", flush=True)
"""


def test_memory_hog_is_killed_and_reported(backend):
    if not cgroup_or_fail_closed("memory", backend):
        return
    done = pysandbox.run(_py(HOG.format(mib=256)), policy=_policy(memory="64M"), backend=backend,
                         capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL and b"survived" not in done.stdout, done
    assert done.limit == "memory"
    # live control: 96 MiB (more than the limit) without it
    control = pysandbox.run(_py(HOG.format(mib=96)), policy=_policy(), backend=backend, capture_output=True,
                            timeout=120)
    assert control.returncode == 0 and b"survived" in control.stdout and control.limit is None


def test_memory_limit_is_reported_on_the_exception(backend):
    if not cgroup_or_fail_closed("memory", backend):
        return
    with pytest.raises(pysandbox.CalledProcessError) as info:
        pysandbox.run(_py(HOG.format(mib=256)), policy=_policy(memory="64M"), backend=backend,
                      capture_output=True, timeout=120, check=True)
    assert info.value.limit == "memory"


SPIN = """
    import time
    while time.process_time() < 2.5:            # bounded: 2.5 s of CPU
        pass
"""
# 1 MiB by dd (Python itself ignores SIGXFSZ: it would get EFBIG, still held, not reported)
WRITE = ["dd", "if=/dev/zero", "of=/tmp/big", "bs=64k", "count=16"]


def test_cpu_time_and_file_size_end_the_command_with_their_signals(backend):
    cpu = pysandbox.run(_py(SPIN), policy=_policy(cpu_time=1), backend=backend, timeout=120)
    assert cpu.returncode == -signal.SIGXCPU and cpu.limit == "cpu_time"
    big = pysandbox.run(WRITE, policy=_policy(file_size="64K"), backend=backend, timeout=60, capture_output=True)
    assert big.returncode == -signal.SIGXFSZ and big.limit == "file_size"
    # live controls: the same commands without limits end normally
    for command in (_py(SPIN), WRITE):
        done = pysandbox.run(command, policy=_policy(), backend=backend, timeout=120, capture_output=True)
        assert done.returncode == 0 and done.limit is None


OPEN = """
    import os
    fds = []
    try:
        for _ in range(200):                    # bounded
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    print(len(fds))
"""


def test_open_files_and_core_dumps(backend):
    done = pysandbox.run(_py(OPEN), policy=_policy(open_files=16), backend=backend, capture_output=True,
                         timeout=60)
    assert done.returncode == 0 and int(done.stdout) < 16
    control = pysandbox.run(_py(OPEN), policy=_policy(), backend=backend, capture_output=True, timeout=60)
    assert int(control.stdout) == 200
    # the lowest limit does not break the setup (it is set after every setup descriptor)
    low = pysandbox.run(["sh", "-c", "ulimit -n; ulimit -c"], policy=_policy(open_files=5), backend=backend,
                        capture_output=True, timeout=60)
    assert low.returncode == 0 and low.stdout.split() == [b"5", b"0"], low


def test_the_hard_limit_cannot_be_raised_from_inside(backend):
    """Root inside the sandbox (its own user namespace) cannot raise a hard rlimit."""
    source = """
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard * 2, hard * 2))
            print("raised")
        except (ValueError, OSError):
            print("refused", hard)
    """
    done = pysandbox.run(_py(source), policy=_policy(file_size="1M").replace(uid=0, gid=0), backend=backend,
                         capture_output=True, timeout=60)
    assert done.stdout.split() == [b"refused", str(1 << 20).encode()], done
    # live control: lowering works
    lower = pysandbox.run(_py("import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))"),
                          policy=_policy(file_size="1M"), backend=backend, timeout=60)
    assert lower.returncode == 0


def test_wall_time_kills_the_sandbox_and_is_reported(backend):
    done = pysandbox.run(["sleep", "30"], policy=_policy(wall_time=0.5), backend=backend, timeout=60)
    assert done.returncode == -signal.SIGKILL and done.limit == "wall_time"
    quick = pysandbox.run(["true"], policy=_policy(wall_time=30), backend=backend, timeout=60)
    assert quick.returncode == 0 and quick.limit is None


def _launcher_cgroup_path(controller: str) -> str:
    with open("/proc/self/cgroup") as f:
        for line in f:
            _hier, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    pytest.skip(f"not applicable here: no cgroup v1 {controller} line in /proc/self/cgroup")


def test_cgroup_limit_fails_closed_where_none_can_be_made(backend, tmp_path, monkeypatch):
    """A directory that is not a cgroup (a fake tree at $PYSANDBOX_CGROUP_ROOT), and no
    hierarchy at all: cgroup_unavailable, the command never runs, nothing is left."""
    marker = tmp_path / "ran"
    work = tmp_path / "work"
    work.mkdir()
    command = ["sh", "-c", f"touch {marker}"]
    policy = Policy.default(workdir=str(work), rw=[str(tmp_path)], limits=Limits(memory="64M", pids=32))
    fake = tmp_path / "cgroot"
    own = fake / "memory" / _launcher_cgroup_path("memory").lstrip("/")
    own.mkdir(parents=True)
    (fake / "pids").mkdir()
    monkeypatch.setenv("PYSANDBOX_CGROUP_ROOT", str(fake))
    with pytest.raises(LimitUnavailable) as info:
        pysandbox.run(command, policy=policy, backend=backend, timeout=60)
    assert info.value.reason.value == "cgroup_unavailable"
    assert not marker.exists()
    assert os.listdir(own) == [] and os.listdir(fake / "pids") == []   # what was made is removed
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PYSANDBOX_CGROUP_ROOT", str(empty))
    with pytest.raises(LimitUnavailable) as info:
        pysandbox.run(command, policy=policy, backend=backend, timeout=60)
    assert info.value.reason.value == "cgroup_unavailable" and not marker.exists()
    # live control: with the same fake root, the rlimits need no cgroup and run
    done = pysandbox.run(command, policy=policy.replace(limits=Limits(file_size="1M")), backend=backend,
                         timeout=60)
    assert done.returncode == 0 and marker.exists()


NOT_DELEGATED = """
    import pysandbox
    from pysandbox import Limits, Policy
    try:
        pysandbox.run(["true"], policy=Policy.default(limits=Limits(pids=32)), backend={backend!r})
        print("ran")
    except pysandbox.LimitUnavailable as exc:
        print(exc.reason.value, exc.limit)
"""


def test_read_only_cgroup_tree_is_controller_not_delegated(backend, tmp_path):
    """The launcher's own cgroup exists but may not be written (a read-only copy of the
    tree, in a mount namespace of the test's own): controller_not_delegated."""
    path = _launcher_cgroup_path("pids")
    fake = tmp_path / "ro"
    fake.mkdir()
    script = (f'mount -t tmpfs none "$1" && mkdir -p "$1/pids{path if path != "/" else ""}" && '
              f'mount -o remount,ro,bind "$1" && PYSANDBOX_CGROUP_ROOT="$1" exec "$2" -c "$3"')
    flags = ["-m"] if os.geteuid() == 0 else ["-Urm"]
    done = subprocess.run(["unshare", *flags, "sh", "-c", script, "sh", str(fake), sys.executable,
                           textwrap.dedent(NOT_DELEGATED.format(backend=backend))],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(pysandbox.__file__))})
    if done.returncode != 0 and "unshare" in done.stderr:
        need("unshare -m", done.stderr.strip())
    assert done.stdout.split() == ["controller_not_delegated", "pids"], (done.stdout, done.stderr)


def test_unprivileged_memory_limit_fails_closed_rlimits_still_work(backend):
    """As a user the host does not delegate a cgroup to: the reason, and the rlimits work."""
    ok, reason, _detail = host_support("memory")
    if ok:
        pytest.skip("not applicable here: this launcher can make memory cgroups (the positive tests run)")
    with pytest.raises(LimitUnavailable) as info:
        pysandbox.run(["true"], policy=_policy(memory="64M", file_size="1M"), backend=backend)
    assert info.value.reason.value == reason and reason in FAIL_CLOSED
    big = pysandbox.run(WRITE, policy=_policy(file_size="64K"), backend=backend, timeout=60, capture_output=True)
    assert big.returncode == -signal.SIGXFSZ and big.limit == "file_size"


def test_cli_names_the_limit(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pysandbox", "run", "--no-workdir", "--limit-wall", "0.5", "--",
                           "sleep", "30"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 128 + signal.SIGKILL
    assert "pysandbox: limit: wall_time 0.5s reached" in done.stderr
    done = subprocess.run([sys.executable, "-m", "pysandbox", "run", "--no-workdir", "--limit-cpu", "1", "--",
                           *_py(SPIN)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 128 + signal.SIGXCPU and "pysandbox: limit: cpu_time 1s reached" in done.stderr


ESCAPE = """
    import os, sys
    mine = open("/proc/self/cgroup").read()
    tried = []
    for line in mine.splitlines():
        _h, names, path = line.split(":", 2)
        if "pysandbox-" not in path:
            continue
        for controller in names.split(","):
            parent = "/sys/fs/cgroup/" + controller + os.path.dirname(path)
            for name in ("cgroup.procs", "tasks"):
                try:
                    with open(os.path.join(parent, name), "w") as f:
                        f.write(str(os.getpid()))
                    tried.append("moved")
                except OSError as exc:
                    tried.append(exc.errno)
    still = sum("pysandbox-" in line for line in open("/proc/self/cgroup").read().splitlines())
    print(len(tried), "moved" in tried, still)
"""


def test_root_inside_cannot_leave_its_cgroup(backend):
    """uid 0 of the sandbox tries to move itself to the parent cgroup (the launcher's):
    refused, and it is still in every cgroup of its launch."""
    if not cgroup_or_fail_closed("pids", backend):
        return
    done = pysandbox.run(_py(ESCAPE), policy=_policy(pids=32, memory="64M").replace(uid=0, gid=0), backend=backend,
                         capture_output=True, timeout=60)
    tried, moved, still = done.stdout.split()
    assert int(tried) >= 2 and moved == b"False" and int(still) >= 1, done
    # live control: the launcher (the host's side) can move a process of its own there
    ok = pysandbox.Popen(["sleep", "30"], policy=_policy(pids=32), backend=backend)
    try:
        group = ok._child.cgroups.groups[0]
        target = os.path.join(os.path.dirname(group.path), "cgroup.procs")
        with open(os.path.join(group.path, "cgroup.procs")) as f:
            first = int(f.read().split()[0])
        with open(target, "w") as f:
            f.write(str(first))
        assert first not in group.pids()
    finally:
        ok.kill()
        ok.wait()


def test_asyncio_run_reports_the_limit(backend):
    import asyncio
    from pysandbox import aio

    async def main():
        return await aio.run(["sleep", "30"], policy=_policy(wall_time=0.5), backend=backend, timeout=60)
    done = asyncio.run(main())
    assert done.returncode == -signal.SIGKILL and done.limit == "wall_time"


def test_status_reports_each_limit(tmp_path, monkeypatch):
    from pysandbox.status import clear_cache, status
    clear_cache()
    st = status()
    assert set(st.limits) == {"memory", "pids", "cpu_time", "wall_time", "file_size", "open_files"}
    assert all(st.limits[k]["available"] for k in ("cpu_time", "wall_time", "file_size", "open_files"))
    for kind in ("memory", "pids"):
        ok, reason, _detail = host_support(kind)
        if kind == "pids" and not ok and nproc.available()[0]:   # no cgroup: RLIMIT_NPROC holds it
            assert st.limits[kind]["available"] and st.limits[kind]["mechanism"] == nproc.MECHANISM
            continue
        assert st.limits[kind]["available"] is ok and st.limits[kind]["reason"] == reason
    # a host without a cgroup hierarchy (an empty fake root): each cgroup limit says why,
    # and a policy asking for one is not available here
    monkeypatch.setenv("PYSANDBOX_CGROUP_ROOT", str(tmp_path))
    st = status(Policy.default(limits=Limits(pids=10)))
    if nproc.available()[0]:   # pids: RLIMIT_NPROC; memory has nothing else
        assert st.limits["pids"]["available"] and st.limits["pids"]["mechanism"] == nproc.MECHANISM
        assert st.available
        st = status(Policy.default(limits=Limits(memory="64M")))
        assert st.limits["memory"]["reason"] == "cgroup_unavailable" and not st.limits["memory"]["available"]
    else:
        assert st.limits["pids"]["reason"] == "cgroup_unavailable" and not st.limits["pids"]["available"]
    assert not st.available and st.reason == "cgroup_unavailable"
    assert status(Policy.default(limits=Limits(cpu_time=5))).available   # rlimits need no cgroup


def test_a_refused_placement_fails_closed(backend, tmp_path, monkeypatch):
    """The kernel refusing the sandbox's move into its cgroup (simulated: a cgroup.procs
    that is not there) ends the launch before the command runs, and the cgroups are
    closed; live control: the same launch with the placement working runs."""
    from pysandbox import enforcement, sandbox_start

    class Fake:
        def __init__(self, procs):
            self.procs_files, self.closed = procs, 0

        def close(self):
            self.closed += 1
            return {}
    marker = tmp_path / "ran"
    policy = Policy.default(workdir=str(tmp_path), limits=Limits(pids=32))
    fake = Fake((str(tmp_path / "missing" / "cgroup.procs"),))
    monkeypatch.setattr(sandbox_start, "prepare", lambda limits: (fake, ()))
    with pytest.raises(LimitUnavailable):
        pysandbox.run(["touch", str(marker)], policy=policy, backend=backend, timeout=60)
    assert not marker.exists() and fake.closed == 1
    real = tmp_path / "procs"
    real.write_text("")
    fake = Fake((str(real),))   # a plain file takes the write: the launch goes on
    done = pysandbox.run(["touch", str(marker)], policy=policy, backend=backend, timeout=60)
    assert done.returncode == 0 and marker.exists() and fake.closed == 1
    assert enforcement.prepare is not sandbox_start.prepare   # only the launch layer's name was replaced


LIMITED_LAUNCHER = """
    import sys
    import pysandbox
    from pysandbox import Limits, Policy
    proc = pysandbox.Popen(["sleep", "600"], policy=Policy.default(limits=Limits(memory="64M", pids=16)),
                           backend=sys.argv[1])
    print(" ".join(g.path for g in proc._child.cgroups.groups), flush=True)
    proc.wait()
"""


def test_a_sigkilled_launchers_cgroups_are_removed_by_the_next_launch(backend):
    """A launcher SIGKILLed during a limited launch leaves its (emptied) cgroups; the next
    limited launch removes them. Kept: the same scheme's name of a live process (a
    sleeping child of this test), of another user, and one with a process in it; removed
    too: a live pid's name with another start time (the pid reused)."""
    from tests.support import cgroups as cg
    if not (cgroup_or_fail_closed("memory", backend) and cgroup_or_fail_closed("pids", backend)):
        return
    launcher = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LIMITED_LAUNCHER), backend],
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(pysandbox.__file__))})
    made, left = [], []
    sleeper = subprocess.Popen(["sleep", "600"])
    held = subprocess.Popen(["sleep", "600"])
    try:
        left += launcher.stdout.readline().split()
        assert left, "the launcher did not launch"
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        # control: the leak is real (the sandbox died with its launcher; its cgroups stay)
        assert all(cg.wait_empty(p) for p in left) and all(os.path.isdir(p) for p in left), left
        assert {os.path.dirname(p) for p in left} == set(cg.parents())
        stay, gone = [], []
        for parent in cg.parents():
            live = os.path.join(parent, cg.leftover_name(sleeper.pid))
            reused = os.path.join(parent, cg.leftover_name(sleeper.pid, start=cg.start_time(sleeper.pid) - 1))
            foreign = os.path.join(parent, cg.leftover_name(cg.dead_pid()))
            busy = os.path.join(parent, cg.leftover_name(cg.dead_pid()))
            for path in (live, reused, foreign, busy):
                os.mkdir(path)
                made.append(path)
            os.chown(foreign, 1, 1)   # another user's (daemon): never ours to remove
            with open(os.path.join(busy, "cgroup.procs"), "w") as f:
                f.write(str(held.pid))
            stay += [live, foreign, busy]
            gone.append(reused)
        done = pysandbox.run(["true"], policy=_policy(memory="64M", pids=16), backend=backend, timeout=60)
        assert done.returncode == 0
        assert not any(os.path.exists(p) for p in left + gone), [p for p in left + gone if os.path.exists(p)]
        assert all(os.path.isdir(p) for p in stay), [p for p in stay if not os.path.isdir(p)]
    finally:
        for proc in (launcher, sleeper, held):
            proc.kill()
            proc.wait()
        launcher.stdout.close()
        cg.remove(made + left)


def _cgroup2_own() -> str:
    """This process's cgroup v2 directory (the cgroup2 mount and the ``0::`` line)."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[2] == "cgroup2"]
    with open("/proc/self/cgroup") as f:
        path = next((line.rstrip("\n")[3:] for line in f if line.startswith("0::")), None)
    if not mounts or path is None:
        need("cgroup v2", "no cgroup2 mount or no 0:: line in /proc/self/cgroup")
    return mounts[0] + (path if path != "/" else "")


def test_the_sweep_on_a_cgroup_v2_tree():
    """The sweep's kernel side on cgroup v2 (whichever controllers it has): an empty
    leftover of a dead launcher goes; a populated one (EBUSY), a live launcher's and a
    child cgroup's parent stay."""
    from tests.support import cgroups as cg
    from pysandbox.cgroup_leftovers import sweep
    parent = _cgroup2_own()
    sleeper = subprocess.Popen(["sleep", "600"])
    held = subprocess.Popen(["sleep", "600"])
    dead, live, busy, nested = (os.path.join(parent, cg.leftover_name(p))
                                for p in (cg.dead_pid(), sleeper.pid, cg.dead_pid(), cg.dead_pid()))
    made = []
    try:
        for path in (dead, live, busy, nested, os.path.join(nested, "child")):
            try:
                os.mkdir(path)
            except PermissionError as exc:
                why = f"this user may not make a cgroup in {parent} ({exc.strerror})"
                if os.geteuid() == 0:
                    need("a writable cgroup v2", why)
                not_applicable(why)   # the launches fail closed (test_cgroup_limit_fails_closed_...)
            made.insert(0, path)
        with open(os.path.join(busy, "cgroup.procs"), "w") as f:
            f.write(str(held.pid))
        assert sweep([parent]) == [dead]
        assert all(os.path.isdir(p) for p in (live, busy, nested))
    finally:
        for proc in (sleeper, held):
            proc.kill()
            proc.wait()
        cg.remove(made)
