"""The native check folded into the launch (pysandbox/backends/__init__.py
``after_failed_launch``): a launch does not probe namespaces first; a native launch that
fails before its command exists with a capability error runs the full check, and its
answer decides as before (auto: bwrap with the same warning; an explicit native: the
check's reason; a passing check: the launch's own error). Each case shows the command ran
at most once (a marker file the command appends to), with its live control."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import pysandbox
from pysandbox import backends as B
from pysandbox.errors import CapabilityUnavailable, Reason, SetupError, UserNamespaceUnavailable

pytestmark = pytest.mark.requires("userns", "native")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FailingNative:
    """A native backend whose host lacks user namespaces (its check's probe says so) and
    whose launch fails the way a failed clone does; or, ``host_ok``, whose probe passes
    and whose launch fails with the plan's own capability error. Counts both."""

    name = "native"

    def __init__(self, host_ok: bool = False):
        self.host_ok = host_ok
        self.spawns = 0
        self.probes = 0

    def check(self, plan, probe: bool = True) -> None:
        if probe:
            self.probes += 1
            if not self.host_ok:
                raise UserNamespaceUnavailable("clone: probe says no", Reason.USER_NAMESPACE_UNAVAILABLE)

    def spawn(self, plan, launch):
        self.spawns += 1
        err = (CapabilityUnavailable("proc: plan's own", Reason.PROC_MOUNT_FAILED) if self.host_ok
               else UserNamespaceUnavailable("clone: launch says no", Reason.USER_NAMESPACE_UNAVAILABLE))
        err.before_command = True
        raise err


@pytest.fixture
def fake_native(monkeypatch):
    def install(**kw):
        fake = FailingNative(**kw)
        monkeypatch.setitem(B._instances, "native", fake)
        return fake
    return install


def _bwrap_or_skip():
    try:
        B.get_backend("bwrap").check(pysandbox.process.compiled(pysandbox.Policy.default()))
    except (pysandbox.BackendUnavailable, CapabilityUnavailable) as exc:
        pytest.skip(f"bwrap backend unavailable here: {exc}")


def _appender(tmp_path):
    marker = tmp_path / "ran"
    return marker, ["sh", "-c", f"echo x >> {marker}"], pysandbox.Policy.default(workdir=str(tmp_path))


def test_auto_falls_back_to_bwrap_after_a_failed_first_launch_and_runs_the_command_once(
        fake_native, tmp_path, caplog):
    _bwrap_or_skip()
    fake = fake_native()
    marker, argv, policy = _appender(tmp_path)
    with caplog.at_level("WARNING", logger="pysandbox"):
        proc = pysandbox.Popen(argv, policy=policy)
        assert proc.wait(timeout=60) == 0
    assert proc.backend_name == "bwrap"
    assert (fake.spawns, fake.probes) == (1, 1)   # one launch, then the full check once
    assert marker.read_text() == "x\n"            # the command ran exactly once
    assert "native backend unavailable (user_namespace_unavailable); using bwrap" in caplog.text


def test_explicit_native_raises_the_checks_reason(fake_native, tmp_path):
    fake = fake_native()
    marker, argv, policy = _appender(tmp_path)
    with pytest.raises(UserNamespaceUnavailable, match="probe says no"):
        pysandbox.run(argv, policy=policy, backend="native")
    assert (fake.spawns, fake.probes) == (1, 1) and not marker.exists()


def test_a_failure_the_check_does_not_confirm_is_raised_as_it_came(fake_native, tmp_path):
    """Control for the two above: the host can make the namespaces (the probe passes), so
    the launch's own error stands, under auto too: no bwrap, no second launch."""
    fake = fake_native(host_ok=True)
    marker, argv, policy = _appender(tmp_path)
    with pytest.raises(CapabilityUnavailable, match="plan's own") as info:
        pysandbox.run(argv, policy=policy)
    assert info.value.reason is Reason.PROC_MOUNT_FAILED
    assert (fake.spawns, fake.probes) == (1, 1) and not marker.exists()


def test_a_failure_after_the_command_may_exist_is_never_retried(fake_native, tmp_path):
    """Without ``before_command`` (a failure the native backend does not vouch happened
    before the command's exec) nothing is checked or relaunched."""
    fake = fake_native()
    fake.spawn = lambda plan, launch: (_ for _ in ()).throw(
        UserNamespaceUnavailable("late", Reason.USER_NAMESPACE_UNAVAILABLE))
    with pytest.raises(UserNamespaceUnavailable, match="late"):
        pysandbox.run(["true"], policy=pysandbox.Policy.default(workdir=str(tmp_path)))
    assert fake.probes == 0


def test_on_start_keeps_the_check_before_the_launch(fake_native, tmp_path):
    """A caller's on_start must not see a first, failed launch: the probe runs first."""
    _bwrap_or_skip()
    fake = fake_native()
    marker, argv, policy = _appender(tmp_path)
    pids = []
    proc = pysandbox.Popen(argv, policy=policy, on_start=pids.append)
    assert proc.wait(timeout=60) == 0 and proc.backend_name == "bwrap"
    assert (fake.spawns, fake.probes) == (0, 1) and len(pids) == 1 and marker.read_text() == "x\n"


@pytest.mark.parametrize("kind", ["session", "pool"])
def test_sessions_and_pools_take_the_same_decision(fake_native, tmp_path, caplog, kind):
    """Sessions and pools keep no backend check of their own: a session's server is a
    one-shot launch (pysandbox/session.py starts it as a SandboxProcess), so the deferred
    check decides as above: auto falls back to bwrap with the same warning and the
    command runs once; the explicit native choice raises the check's reason."""
    _bwrap_or_skip()
    fake = fake_native()
    marker, argv, policy = _appender(tmp_path)
    with caplog.at_level("WARNING", logger="pysandbox"):
        if kind == "session":
            with pysandbox.Sandbox(policy) as sb:
                assert sb.backend_name == "bwrap" and sb.run(argv).returncode == 0
        else:
            with pysandbox.Pool(policy, size=1) as pool:
                proc = pool.Popen(argv)
                assert proc.wait(timeout=60) == 0 and proc.backend_name == "bwrap"
    assert fake.spawns >= 1 and fake.probes >= 1   # the native launch was tried, then checked
    assert marker.read_text() == "x\n"
    assert "native backend unavailable (user_namespace_unavailable); using bwrap" in caplog.text
    spawns = fake.spawns
    with pytest.raises(UserNamespaceUnavailable, match="probe says no"):
        if kind == "session":
            pysandbox.Sandbox(policy, backend="native")
        else:
            with pysandbox.Pool(policy, size=1, backend="native") as pool:
                pool.run(argv)
    assert fake.spawns > spawns and marker.read_text() == "x\n"


def test_real_native_failures_carry_before_command_only_before_the_exec(tmp_path):
    """The real backend: a setup step's failure record is marked, a missing command
    (STAGE_EXEC: the exec itself failed) is not a capability error and is not marked."""
    be = B.get_backend("native")
    plan = pysandbox.process.compiled(pysandbox.Policy.default(workdir=str(tmp_path)))
    from pysandbox.backends.base import Launch
    with pytest.raises(FileNotFoundError) as info:
        be.spawn(plan, Launch(argv=[str(tmp_path / "missing")], env={}))
    assert getattr(info.value, "before_command", False) is False
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "f").write_text("")
    pol = pysandbox.Policy.default(workdir=str(tmp_path))
    bad = pol.replace(fs=pol.fs + (pysandbox.policy.Bind(str(ro), str(ro), readonly=True),
                                   pysandbox.policy.Chmod(str(ro / "f"), 0o600)))
    with pytest.raises(SetupError) as info:   # chmod on a read-only bind: EROFS, a setup record
        be.spawn(pysandbox.process.compiled(bad), Launch(argv=["true"], env={}))
    assert info.value.stage == "chmod" and info.value.before_command is True


HELPER = textwrap.dedent("""
    import json, logging, os, sys
    sys.path.insert(0, {root!r})
    import pysandbox
    marker = sys.argv[1]
    pol = pysandbox.Policy.default(workdir=os.path.dirname(marker))
    argv = ["sh", "-c", "echo x >> " + marker]
    seen = []
    logging.getLogger("pysandbox").addHandler(type("H", (logging.Handler,), {{"emit": lambda s, r: seen.append(r.getMessage())}})())
    out = {{}}
    for how in ("auto", "native"):
        try:
            p = pysandbox.Popen(argv, policy=pol, backend=how)
            out[how] = [p.backend_name, p.wait()]
        except pysandbox.SandboxError as exc:
            out[how] = [type(exc).__name__, exc.reason.value]
    out["warnings"] = seen
    out["ran"] = open(marker).read().count("x") if os.path.exists(marker) else 0
    print(json.dumps(out))
""")


def _outer(setup: str, marker, tmp_path):
    """HELPER inside ``unshare -U -r -m`` after ``setup`` (a host condition made in a
    namespace of the test's own: the host's settings are untouched)."""
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER.format(root=ROOT))
    done = subprocess.run(["unshare", "-U", "-r", "-m", "sh", "-c", f"{setup} && exec {sys.executable} {helper} {marker}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_user_namespaces_disabled_auto_decides_as_the_check_did(tmp_path):
    """A real host condition: no user namespace can be made (max_user_namespaces 0 in a
    user namespace of the test's own). auto takes bwrap with the warning where bwrap can
    run there, else raises native's reason; explicit native raises the check's reason.
    The command ran once at most per launch that succeeded. Control: the same helper
    without the setting runs native, no warning."""
    marker = tmp_path / "ran"
    out = _outer("echo 0 > /proc/sys/user/max_user_namespaces", marker, tmp_path)
    assert out["native"] == ["UserNamespaceUnavailable", Reason.USER_NAMESPACE_UNAVAILABLE.value]
    if out["auto"][0] == "bwrap":
        assert out["auto"][1] == 0 and out["ran"] == 1
        assert out["warnings"] == ["pysandbox: native backend unavailable (user_namespace_unavailable); using bwrap"]
    else:
        assert out["auto"] == ["UserNamespaceUnavailable", Reason.USER_NAMESPACE_UNAVAILABLE.value]
        assert out["ran"] == 0
    marker.unlink(missing_ok=True)
    ok = _outer("true", marker, tmp_path)
    assert ok["auto"] == ["native", 0] and ok["native"] == ["native", 0] and ok["ran"] == 2
    assert ok["warnings"] == []
