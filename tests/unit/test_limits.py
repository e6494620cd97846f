"""Resource limits without a sandbox: the Limits record, what it compiles to for each
backend, the command line and profile forms, the report decision, and the cgroup
lookup and creation against fake trees (README "Resource limits")."""

from __future__ import annotations

import os
import resource
import signal
import types

import pytest

from pysandbox import cli, cgroup
from pysandbox import plan as P
from pysandbox.backends.bwrap import bwrap_tail as T
from pysandbox.backends import native as N
from pysandbox.cli_limits import merged
from pysandbox.enforcement import which_limit
from pysandbox.errors import LimitUnavailable, PolicyError, Reason
from pysandbox.limits import Limits, format_size, parse_size
from pysandbox.policy import Policy
from pysandbox.profile import load


@pytest.mark.parametrize("text, value", [("512M", 512 << 20), ("4k", 4096), ("1G", 1 << 30), ("2MiB", 2 << 20),
                                         ("  7 ", 7), (1234, 1234), ("3T", 3 << 40)])
def test_sizes(text, value):
    assert parse_size(text) == value
    assert parse_size(format_size(value)) == value


@pytest.mark.parametrize("bad", ["", "-1M", "1.5G", "12Q", "M", 0, -4, True, None, 2.0])
def test_bad_sizes(bad):
    with pytest.raises(PolicyError) as info:
        parse_size(bad, "memory")
    assert info.value.reason is Reason.INVALID_SIZE and info.value.field == "memory"


@pytest.mark.parametrize("kw, reason, field", [
    ({"memory": "1M"}, Reason.INVALID_SIZE, "memory"),            # below the 4M floor
    ({"pids": 0}, Reason.INVALID_VALUE, "pids"),
    ({"pids": "8"}, Reason.INVALID_VALUE, "pids"),
    ({"cpu_time": 1.5}, Reason.INVALID_VALUE, "cpu_time"),
    ({"wall_time": 0}, Reason.INVALID_VALUE, "wall_time"),
    ({"wall_time": float("nan")}, Reason.INVALID_VALUE, "wall_time"),
    ({"open_files": 2}, Reason.INVALID_VALUE, "open_files"),
    ({"file_size": "x"}, Reason.INVALID_SIZE, "file_size"),
])
def test_bad_limits(kw, reason, field):
    with pytest.raises(PolicyError) as info:
        Limits(**kw)
    assert info.value.reason is reason and info.value.field == field


def test_rlimits_and_cgroup_split():
    lim = Limits(memory="64M", pids=10, cpu_time=3, file_size="1M", open_files=20, wall_time=1.5)
    assert lim.memory == 64 << 20 and lim.wall_time == 1.5
    assert lim.cgroup == {"memory": 64 << 20, "pids": 10}
    assert lim.rlimits() == ((resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_CPU, 3, 4),
                             (resource.RLIMIT_FSIZE, 1 << 20, 1 << 20), (resource.RLIMIT_NOFILE, 20, 20))
    assert not any(r == resource.RLIMIT_AS for r, _s, _h in lim.rlimits())   # never a memory limit
    assert Limits(wall_time=5).rlimits() == ((resource.RLIMIT_CORE, 0, 0),)  # any limit: no core dumps
    assert Policy.default(limits=Limits()).limits is None                    # no limit at all: none
    with pytest.raises(PolicyError):
        Policy.default(limits={"memory": "64M"})


def test_plan_carries_the_rlimits_to_both_backends():
    plan = P.compile(Policy.default(limits=Limits(file_size="1M", open_files=9)), outer_ids=(1000, 1001))
    assert plan.rlimits == Limits(file_size="1M", open_files=9).rlimits()
    assert P.compile(Policy.default(), outer_ids=(1000, 1001)).rlimits == ()
    # native: RLIMIT ops after INIT (the command's process), in the plan's order
    ops = N.translate(plan, base="/tmp")
    kinds = [op.kind for op in ops]
    assert kinds.index("INIT") < kinds.index("RLIMIT")
    assert [(op.n, op.m, op.mode) for op in ops if op.kind == "RLIMIT"] == list(plan.rlimits)
    assert N.OP_KINDS[N.OP["RLIMIT"] - 1] == "RLIMIT"
    # bwrap backend: our init runs the same RLIMIT ops, after its INIT
    tail_kinds = [op.kind for op in T.tail_ops(plan, [])]
    assert [op for op in T.tail_ops(plan, []) if op.kind == "RLIMIT"] == [op for op in ops if op.kind == "RLIMIT"]
    assert tail_kinds.index("INIT") < tail_kinds.index("RLIMIT")


def test_which_limit():
    lim = Limits(cpu_time=1, file_size="1M", memory="64M", pids=8)
    assert which_limit(lim, -signal.SIGKILL, {"memory": 1, "pids": 0}, False) == "memory"
    assert which_limit(lim, -signal.SIGKILL, {"memory": 1}, True) == "wall_time"
    assert which_limit(lim, -signal.SIGXCPU, {}, False) == "cpu_time"
    assert which_limit(lim, -signal.SIGXFSZ, {}, False) == "file_size"
    assert which_limit(lim, 0, {"pids": 3}, False) == "pids"
    assert which_limit(lim, 0, {"pids": 0, "memory": 0}, False) is None
    # a signal the command sent itself is not a limit it did not have
    assert which_limit(Limits(memory="64M"), -signal.SIGXCPU, {}, False) is None


def _args(**given):
    names = ("memory", "pids", "cpu_time", "wall_time", "file_size", "open_files")
    return types.SimpleNamespace(**{f"limit_{n}": given.get(n) for n in names})


def test_cli_options_over_the_profile(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[limits]\nmemory = "256M"\npids = 100\nwall_time = 30\n')
    profile = load(str(prof))
    kw = profile.policy_kwargs(__import__("pysandbox.policy", fromlist=["Env"]).Env)
    assert kw["limits"] == Limits(memory="256M", pids=100, wall_time=30)
    got = merged(kw["limits"], _args(memory="64M", cpu_time="5"))
    assert got == Limits(memory="64M", pids=100, wall_time=30, cpu_time=5)
    assert merged(None, _args()) is None
    with pytest.raises(PolicyError) as info:
        merged(None, _args(pids="many"))
    assert info.value.field == "pids"


@pytest.mark.parametrize("text, fragment", [
    ('[limits]\nmemroy = "1G"\n', "did you mean 'memory'"),
    ('[limits]\nmemory = "lots"\n', "limits.memory"),
    ('[limits]\npids = "8"\n', "limits.pids"),
    ('limits = 5\n', "limits"),
])
def test_profile_mistakes(tmp_path, text, fragment):
    prof = tmp_path / "p.toml"
    prof.write_text(text)
    with pytest.raises(PolicyError) as info:
        Policy.from_toml(str(prof))
    assert fragment in str(info.value) and "p.toml" in str(info.value)


def test_cli_errors_name_the_option(capsys):
    assert cli.main(["run", "--no-workdir", "--limit-memory", "lots", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pysandbox: invalid_size: --limit-memory lots:"), err
    assert cli.main(["run", "--no-workdir", "--limit-open-files", "x", "--", "true"]) == 2
    assert "--limit-open-files" in capsys.readouterr().err


def test_a_session_splits_its_limits_and_a_command_only_narrows_them():
    """pysandbox/session_limits.py: memory/pids are the session's (its cgroups), the rest
    each command's; a command's own value wins only when smaller."""
    from pysandbox.session_limits import Budget
    budget = Budget(Limits(memory="64M", pids=10, cpu_time=5, wall_time=30, open_files=64))
    assert budget.server_limits() == Limits(memory="64M", pids=10)   # no rlimit binds the server
    assert Budget(Limits(cpu_time=5)).server_limits() is None and Budget(None).command(None) is None
    narrowed, own = budget.command(Limits(cpu_time=1, wall_time=300, file_size="1M"))
    assert (narrowed.cpu_time, narrowed.wall_time, narrowed.file_size, narrowed.open_files) == (1, 30, 1 << 20, 64)
    assert (narrowed.memory, narrowed.pids, own) == (64 << 20, 10, {})   # the session's, for the report
    assert Budget(None).command(Limits(cpu_time=2)) == (Limits(cpu_time=2), {})
    assert budget.command(Limits(memory="32M", pids=100)).own == {"memory": 32 << 20, "pids": 10}   # never wider
    with pytest.raises(PolicyError) as info:
        budget.command({"memory": 1})
    assert info.value.reason is Reason.INVALID_VALUE


def test_rlimit_nproc_is_relied_on_only_where_the_kernel_applies_it(monkeypatch):
    from pysandbox import nproc
    assert not nproc._kernel_counts_per_userns("5.13.0") and nproc._kernel_counts_per_userns("5.14.0-1")
    assert nproc._kernel_counts_per_userns("6.18.44-fc") and not nproc._kernel_counts_per_userns("weird")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert not nproc.available()[0]   # uid 0 is never refused a fork for RLIMIT_NPROC


# ---------------------------------------------------------------- cgroup lookup, fake trees

def _self(tmp_path, text):
    path = tmp_path / "self_cgroup"
    path.write_text(text)
    return str(path)


def test_locate_v1_v2_and_none(tmp_path):
    root = tmp_path / "root"
    (root / "memory" / "a" / "b").mkdir(parents=True)
    (root / "cpu,cpuacct" / "x").mkdir(parents=True)
    (root / "unified" / "svc").mkdir(parents=True)
    (root / "unified" / "svc" / "cgroup.controllers").write_text("cpu pids\n")
    me = _self(tmp_path, "4:memory:/a/b\n2:cpu,cpuacct:/x\n0::/svc\n")
    assert cgroup.locate("memory", str(root), me) == (1, str(root / "memory" / "a" / "b"))
    assert cgroup.locate("cpu", str(root), me) == (1, str(root / "cpu,cpuacct" / "x"))
    assert cgroup.locate("pids", str(root), me) == (2, str(root / "unified" / "svc"))   # hybrid host
    with pytest.raises(LimitUnavailable) as info:
        cgroup.locate("memory", str(tmp_path / "nothing"), me)
    assert info.value.reason is Reason.CGROUP_UNAVAILABLE and info.value.limit == "memory"
    # pure v2 at the root
    (root / "cgroup.controllers").write_text("memory pids\n")
    (root / "svc").mkdir()
    (root / "svc" / "cgroup.controllers").write_text("memory pids\n")
    assert cgroup.locate("memory", str(root), _self(tmp_path, "0::/svc\n")) == (2, str(root / "svc"))


def test_create_in_a_tree_that_is_not_a_cgroup_leaves_nothing(tmp_path, monkeypatch):
    """A plain directory where the launcher's cgroup should be: the new directory has no
    control files (the kernel makes them in a real cgroup), so cgroup_unavailable, and
    the directory made is removed again."""
    root = tmp_path / "root"
    own = root / "memory" / "me"
    own.mkdir(parents=True)
    monkeypatch.setattr(cgroup, "locate", lambda c, r=None: (1, str(own)))
    with pytest.raises(LimitUnavailable) as info:
        cgroup.Cgroups.create({"memory": 64 << 20})
    assert info.value.reason is Reason.CGROUP_UNAVAILABLE
    assert os.listdir(own) == []


def test_create_writes_limits_and_close_removes(tmp_path, monkeypatch):
    """With control files present (a stand-in for the kernel's), the limits are written
    there, memsw too, and close() reads the counters and removes the directory."""
    own = tmp_path / "me"
    own.mkdir()
    made = []
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777):
        real_mkdir(path, mode)
        made.append(path)
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "cgroup.procs"):
            open(os.path.join(path, name), "w").close()
        with open(os.path.join(path, "memory.oom_control"), "w") as f:
            f.write("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    monkeypatch.setattr(cgroup, "locate", lambda c, r=None: (1, str(own)))
    monkeypatch.setattr(cgroup.os, "mkdir", mkdir)
    groups = cgroup.Cgroups.create({"memory": 64 << 20})
    path = made[0]
    assert os.path.basename(path).startswith(f"pysandbox-{os.getpid()}-")
    for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
        with open(os.path.join(path, name)) as f:
            assert f.read() == str(64 << 20)
    assert groups.procs_files == (os.path.join(path, "cgroup.procs"),)
    # a plain directory holding files cannot be rmdir'd: close reports what it read and stops
    hits = groups.close(timeout=0.2)
    assert hits == {"memory": 2}
    assert groups.close() is hits   # idempotent


def test_not_delegated_is_its_own_reason(tmp_path, monkeypatch):
    own = tmp_path / "me"
    own.mkdir()
    monkeypatch.setattr(cgroup, "locate", lambda c, r=None: (1, str(own)))

    def refuse(path, mode=0o777):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(cgroup.os, "mkdir", refuse)
    with pytest.raises(LimitUnavailable) as info:
        cgroup.Cgroups.create({"pids": 8})
    assert info.value.reason is Reason.CONTROLLER_NOT_DELEGATED and info.value.limit == "pids"


# ---------------------------------------------------------------- leftovers of killed launchers, fake trees

def test_names_carry_the_launchers_pid_start_time_and_namespaces():
    from pysandbox.cgroup_leftovers import identity, launcher_dead, name, start_time
    mine = name(3)
    pid, start, ns, n, rand = mine[len(cgroup.PREFIX):].split("-")
    assert (int(pid), int(start), ns, n) == (os.getpid(), start_time(os.getpid()), identity()[1], "3")
    assert len(rand) == 8 and len(ns) == 8 and start_time("self") == int(start) > 0
    assert not launcher_dead(mine)   # this process, alive


def test_sweep_removes_only_empty_directories_of_dead_launchers(tmp_path):
    """A plain tree stands in for the parent cgroup: rmdir works there on an empty
    directory as on a cgroup without processes. Removed: a dead pid's, a reused pid's
    (live pid, other start time). Kept: a live process's, another namespace's, one with
    a file in it, a symlink of the scheme, names not of the scheme."""
    from tests.support.cgroups import dead_pid, leftover_name
    from pysandbox.cgroup_leftovers import sweep
    import subprocess
    live = subprocess.Popen(["sleep", "60"])
    try:
        dead = dead_pid()
        gone = [leftover_name(dead), leftover_name(live.pid, start=1)]
        target = tmp_path / "target"
        target.mkdir()
        stay = [leftover_name(live.pid), leftover_name(dead, ns="0badf00d"), leftover_name(dead),
                f"{cgroup.PREFIX}{dead}-0-1-abcdefgh", f"{cgroup.PREFIX}{dead}-1-2-3-4-5", "other"]
        parent = tmp_path / "parent"
        parent.mkdir()
        for entry in gone + stay[:-1]:
            (parent / entry).mkdir()
        (parent / stay[2] / "held").write_text("")            # not empty
        link = leftover_name(dead)
        (parent / link).symlink_to(target)
        removed = sweep([str(parent), str(parent)])
        assert sorted(removed) == sorted(str(parent / e) for e in gone)
        assert sorted(os.listdir(parent)) == sorted(stay[:-1] + [link]) and target.is_dir()
        # the same leftover in a second parent (v1: one per hierarchy) goes too
        other = tmp_path / "other"
        other.mkdir()
        (other / gone[0]).mkdir()
        assert sweep([str(parent), str(other)]) == [str(other / gone[0])]
    finally:
        live.kill()
        live.wait()
    assert sweep([str(tmp_path / "missing")]) == []   # a parent that is not there: nothing, no error


def test_a_failing_sweep_does_not_fail_the_launch(tmp_path, monkeypatch):
    own = tmp_path / "me"
    own.mkdir()
    monkeypatch.setattr(cgroup, "locate", lambda c, r=None: (1, str(own)))

    def boom(parents):
        raise RuntimeError("sweep bug")
    monkeypatch.setattr(cgroup.cgroup_leftovers, "sweep", boom)
    with pytest.raises(LimitUnavailable) as info:   # the plain tree's own failure, not the sweep's
        cgroup.Cgroups.create({"memory": 64 << 20})
    assert info.value.reason is Reason.CGROUP_UNAVAILABLE


def test_create_sweeps_the_parents_first(tmp_path, monkeypatch):
    from tests.support.cgroups import dead_pid, leftover_name
    own = tmp_path / "me"
    own.mkdir()
    left = own / leftover_name(dead_pid())
    left.mkdir()
    monkeypatch.setattr(cgroup, "locate", lambda c, r=None: (1, str(own)))
    with pytest.raises(LimitUnavailable):
        cgroup.Cgroups.create({"pids": 8})
    assert not left.exists() and os.listdir(own) == []
