"""Plan compile: the order of setup operations both backends execute."""

from __future__ import annotations

import os

import pytest

from pysandbox import plan as P
from pysandbox.errors import PolicyError, Reason
from pysandbox.policy import Bind, Dir, File, Hide, Policy, Tmpfs


def kinds(plan):
    return [type(op).__name__ for op in plan.ops]


def test_default_order(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    plan = P.compile(Policy.default(workdir=str(wd), network="deny", keep_authority_sockets=True),
                     outer_ids=(1000, 1000))
    names = kinds(plan)
    assert names[:3] == ["Unshare", "IdMap", "PdeathSig"]
    first_mount = names.index("BindMount")
    pivot = names.index("PivotRoot")
    assert all(n in {c.__name__ for c in P.MOUNT_OPS} for n in names[first_mount:pivot])
    after = names[pivot:]
    # pivot_root, loopback, no nested userns, caps, no_new_privs, seccomp..., session, chdir
    assert after[:5] == ["PivotRoot", "LoopbackUp", "DisableUserns", "DropCapabilities", "NoNewPrivs"]
    assert after[-2:] == ["NewSession", "Chdir"]
    assert set(after[5:-2]) <= {"Seccomp"}
    assert plan.namespaces == frozenset({"user", "mount", "pid", "ipc", "uts", "net"})
    assert plan.idmap == P.IdMap(1000, 1000, 1000, 1000)
    mounts = plan.mount_ops
    assert mounts[:4] == (P.BindMount("/", "/", readonly=True), P.MinimalDev("/dev"), P.MountProc("/proc"),
                          P.MountTmpfs("/tmp"))
    assert P.BindMount(str(wd), str(wd)) in mounts
    assert plan.ops[-1] == P.Chdir(str(wd))


def test_allow_mode_has_no_net_namespace_and_no_loopback():
    plan = P.compile(Policy.default(network="allow"))
    assert "net" not in plan.namespaces
    assert plan.first(P.LoopbackUp) is None


def test_policy_order_is_kept_and_parents_first(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    fs = (Tmpfs("/work"), Dir("/work/x", 0o700), File("/work/x/f", data=b"hi", mode=0o600),
          Bind(str(tmp_path / "a"), "/work/a", readonly=True))
    plan = P.compile(Policy(fs=fs))
    assert plan.mount_ops == (P.MountTmpfs("/work"), P.MakeDir("/work/x", 0o700),
                              P.WriteFile("/work/x/f", b"hi", None, 0o600),
                              P.BindMount(str(tmp_path / "a"), "/work/a", readonly=True))
    ro = [str(tmp_path / "a" / "b"), str(tmp_path / "a")]
    d = Policy.default(ro=ro, network="allow")
    dests = [op.dest for op in d.fs if isinstance(op, Bind)]
    assert dests.index(str(tmp_path / "a")) < dests.index(str(tmp_path / "a" / "b"))


def test_hide_dir_file_and_missing(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("secret")
    fs = (Bind("/", "/", readonly=True), Hide(str(tmp_path / "d")), Hide(str(tmp_path / "f")),
          Hide(str(tmp_path / "absent")))
    ops = P.compile(Policy(fs=fs)).mount_ops
    assert ops[1] == P.MountTmpfs(str(tmp_path / "d"), mode=P.HIDE_MODE, readonly=True)
    assert ops[2] == P.WriteFile(str(tmp_path / "f"), data=b"", mode=P.HIDE_MODE, bind=True, readonly=True)
    assert len(ops) == 3   # the missing path is already hidden


def test_missing_mount_point_inside_host_bind_is_refused(tmp_path):
    fs = (Bind(str(tmp_path), "/w"), Tmpfs("/w/not-there"))
    with pytest.raises(PolicyError) as info:
        P.compile(Policy(fs=fs))
    assert info.value.reason == Reason.MOUNT_POINT_MISSING
    assert not os.path.exists(tmp_path / "not-there")


def test_no_policy_can_ask_for_mount_points_on_the_host(tmp_path):
    """Creating a missing mount point inside a writable host bind (bwrap's way) is
    pybwrap's compile option, no Policy field: a caller of the public API (a policy
    from a profile, a Policy built by a tool) cannot make a launch create files on the
    host with it, nor through the process layer's compile. Live control: the same
    policy compiles with the option, as pybwrap compiles it."""
    from pysandbox.process import compiled
    fs = (Bind(str(tmp_path), "/w"), Tmpfs("/w/not-there"))
    with pytest.raises(TypeError):
        Policy(fs=fs, allow_host_mountpoints=True)
    for attempt in (lambda: P.compile(Policy(fs=fs)), lambda: compiled(Policy(fs=fs))):
        with pytest.raises(PolicyError) as info:
            attempt()
        assert info.value.reason == Reason.MOUNT_POINT_MISSING
    plan = compiled(Policy(fs=fs), allow_host_mountpoints=True)   # control: pybwrap's compile
    assert P.MountTmpfs("/w/not-there") in plan.mount_ops
    assert not os.path.exists(tmp_path / "not-there")   # compiling creates nothing


def test_optional_bind_of_missing_source_is_skipped(tmp_path):
    fs = (Tmpfs("/"), Bind(str(tmp_path / "absent"), "/x", optional=True))
    assert P.compile(Policy(fs=fs)).mount_ops == (P.MountTmpfs("/"),)


def test_hostname_caps_and_session():
    plan = P.compile(Policy(hostname="box", caps_keep=("net_raw",), new_session=False,
                            allow_nested_userns=True, die_with_parent=False,
                            namespaces=frozenset({"user", "uts"})))
    assert plan.first(P.SetHostname) == P.SetHostname("box")
    assert plan.first(P.DropCapabilities) == P.DropCapabilities(frozenset({"net_raw"}))
    assert plan.first(P.NewSession) is None
    assert plan.first(P.DisableUserns) is None
    assert plan.first(P.PdeathSig) is None
    assert plan.ops[-1] == P.Chdir("/")


def test_compile_refuses_non_policy():
    with pytest.raises(PolicyError):
        P.compile("not a policy")
