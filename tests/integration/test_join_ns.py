"""Policy.userns_fd / pidns_fd / userns2_fd on the native backend (bwrap's --userns,
--pidns, --userns2): the command runs in namespaces the caller holds, still with no
capability and a private mount namespace; the new namespaces the policy asks for are
made inside the joined ones. Each join is checked against the holder's own namespace
links (a live control: the holder's sleep is alive before and after, and visible or
not as the pid namespace says). The bwrap backend refuses all three."""

from __future__ import annotations

import os

import pytest

import pysandbox
from pysandbox import policy as PP
from pysandbox.errors import BwrapOptionUnsupported, Reason
from tests.support.nsholder import holder

pytestmark = pytest.mark.requires("userns", "native")

REPORT = ("readlink /proc/self/ns/user /proc/self/ns/pid; cat /proc/1/comm; "
          "grep -E '^CapEff' /proc/self/status | tr -d '\\t'; id -u")
NO_NEW_PID = frozenset({"user", "ipc", "uts"})


def _run(policy, command=REPORT, **kw):
    return pysandbox.run(["sh", "-c", command], policy=policy, backend="native", capture_output=True, text=True,
                         timeout=60, **kw)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "sleep"
    except OSError:
        return False


def test_join_user_and_pid_namespaces():
    with holder() as h:
        assert _alive(h.sleeper)
        policy = PP.Policy.default(userns_fd=h.user, pidns_fd=h.pid, allow_nested_userns=True, namespaces=NO_NEW_PID)
        done = _run(policy)
        assert done.returncode == 0, done.stderr
        user, pid, comm1, capeff, uid = done.stdout.split()
        assert (user, pid) == (h.ids["user"], h.ids["pid"])
        assert comm1 == "sleep"                      # the holder's pid 1 is in our /proc
        assert capeff == "CapEff:0000000000000000"   # root of the joined namespace, no capability
        assert uid == "0"                            # the holder's map: the caller is 0 there
        assert _alive(h.sleeper)


def test_join_user_namespace_then_a_new_pid_namespace_inside():
    with holder() as h:
        policy = PP.Policy.default(userns_fd=h.user, pidns_fd=h.pid, allow_nested_userns=True)   # "pid" too
        done = _run(policy)
        assert done.returncode == 0, done.stderr
        user, pid, comm1, capeff, _ = done.stdout.split()
        assert user == h.ids["user"]
        assert pid not in (h.ids["pid"], os.readlink("/proc/self/ns/pid"))
        assert comm1 != "sleep"                      # our own pid 1: the holder's is not visible
        assert capeff == "CapEff:0000000000000000"
        assert _alive(h.sleeper)


def test_launcher_gets_the_host_pid_after_two_hops():
    """Joining P and making Q inside it: setup hops twice, the second time from inside
    P. The pid on_start and Popen see must be the host's (NSpid: host, P, Q=1), not P's
    view of it, or the launcher would wait for (or kill) the wrong process."""
    seen = []

    def on_start(pid):
        with open(f"/proc/{pid}/status") as f:
            seen.append([line.split()[1:] for line in f if line.startswith("NSpid:")][0])

    with holder() as h:
        policy = PP.Policy.default(userns_fd=h.user, pidns_fd=h.pid, allow_nested_userns=True)
        proc = pysandbox.Popen(["sh", "-c", "exit 7"], policy=policy, backend="native", on_start=on_start)
        assert proc.wait(timeout=60) == 7
    assert len(seen) == 1 and seen[0][0] == str(proc.pid)
    assert len(seen[0]) == 3 and seen[0][2] == "1", seen


def test_join_user_namespace_only():
    with holder() as h:
        done = _run(PP.Policy.default(userns_fd=h.user, allow_nested_userns=True))
        assert done.returncode == 0, done.stderr
        user, pid, *_ = done.stdout.split()
        assert user == h.ids["user"] and pid not in (h.ids["pid"], os.readlink("/proc/self/ns/pid"))


def test_userns2_switches_after_the_setup():
    with holder(inner_user=True) as h:
        policy = PP.Policy.default(userns_fd=h.user, userns2_fd=h.user2, allow_nested_userns=True)
        done = _run(policy)
        assert done.returncode == 0, done.stderr
        user, _, _, capeff, uid = done.stdout.split()
        assert user == h.ids["user2"]
        assert uid == "65534"                        # B maps nobody: the overflow id
        assert capeff == "CapEff:0000000000000000"


def test_joined_sandbox_still_read_only(tmp_path):
    marker = tmp_path / "written"
    with holder() as h:
        policy = PP.Policy.default(workdir=tmp_path, ro=[], userns_fd=h.user, allow_nested_userns=True)
        done = _run(policy, f"touch {marker} && echo wrote; touch /etc/psb-join-probe 2>/dev/null || echo refused")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["wrote", "refused"]   # control: the workdir write succeeds
        assert marker.exists() and not os.path.exists("/etc/psb-join-probe")


def test_joining_a_user_namespace_that_is_not_a_descendant_fails_closed(tmp_path):
    marker = tmp_path / "ran"
    fd = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)   # our own: setns says EINVAL
    try:
        with pytest.raises(pysandbox.SetupError) as info:
            _run(PP.Policy.default(workdir=tmp_path, userns_fd=fd, allow_nested_userns=True), f"touch {marker}")
    finally:
        os.close(fd)
    assert info.value.reason == Reason.SETUP_FAILED and info.value.stage == "join_userns"
    assert "might not be a descendant" in str(info.value)
    assert not marker.exists()


def test_not_a_namespace_descriptor_fails_closed(tmp_path):
    marker = tmp_path / "ran"
    r, w = os.pipe()
    try:
        for field, stage in (("userns_fd", "join_userns"), ("pidns_fd", "join_pidns")):
            extra = {"allow_nested_userns": True} if field == "userns_fd" else {}
            with pytest.raises(pysandbox.SetupError) as info:
                _run(PP.Policy.default(workdir=tmp_path, **{field: r}, **extra), f"touch {marker}")
            assert info.value.stage == stage and info.value.errno == 22, field
    finally:
        os.close(r)
        os.close(w)
    assert not marker.exists()


def test_joining_only_a_foreign_pid_namespace_from_a_new_user_namespace_fails_closed(tmp_path):
    """pidns_fd alone, with the default new user and pid namespaces: an unprivileged
    caller may not join the holder's pid namespace (EPERM at the join); root may, but
    the kernel then refuses a new user namespace's pid namespace inside a pid
    namespace owned by a user namespace that is not its ancestor (EINVAL at the
    unshare). Either way the launch fails closed and the command never runs; the
    control joins the holder's user namespace too and succeeds."""
    marker = tmp_path / "ran"
    with holder() as h:
        with pytest.raises(pysandbox.SetupError) as info:
            _run(PP.Policy.default(workdir=tmp_path, pidns_fd=h.pid), f"touch {marker}")
        assert (info.value.stage, info.value.errno) in (("join_pidns", 1), ("unshare", 22)), info.value
        assert not marker.exists()
        control = _run(PP.Policy.default(workdir=tmp_path, userns_fd=h.user, pidns_fd=h.pid,
                                         allow_nested_userns=True), f"touch {marker}")
        assert control.returncode == 0, control.stderr
        assert marker.exists() and _alive(h.sleeper)


@pytest.mark.requires("bwrap")
def test_bwrap_backend_refuses_namespace_descriptors():
    fd = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        for field in ("userns_fd", "pidns_fd", "userns2_fd"):
            extra = {"allow_nested_userns": True} if field == "userns_fd" else {}
            with pytest.raises(BwrapOptionUnsupported) as info:
                pysandbox.run(["true"], policy=PP.Policy.default(**{field: fd}, **extra), backend="bwrap", timeout=60)
            assert info.value.reason == Reason.BWRAP_OPTION_UNSUPPORTED and field in str(info.value)
    finally:
        os.close(fd)
