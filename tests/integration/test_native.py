"""The native backend against a real kernel: privileges, id maps, nested namespaces,
setup failures at each kind of step, lifetime, descriptors, the mount_setattr
fallback. Runs as root and as an unprivileged user (PYSANDBOX_MUST_WORK=1 in CI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pysandbox
from pysandbox import policy as PP
from pysandbox.backends import get_backend
from pysandbox.backends import native as N
from pysandbox.errors import PolicyError, Reason, SetupError
from pysandbox.process import compiled
from tests.support import need, processes_with, settled_fds, wait_until

pytestmark = pytest.mark.requires("userns", "native")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(argv, policy=None, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 60)
    return pysandbox.run(argv, policy=policy or PP.Policy.default(), backend="native", **kw)


def status_fields(text):
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


# ---------------------------------------------------------------- privileges

def test_no_capabilities_and_no_new_privs():
    done = run(["cat", "/proc/self/status"])
    assert done.returncode == 0, done.stderr
    st = status_fields(done.stdout)
    for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        assert int(st[field].strip(), 16) == 0, (field, st[field])
    assert st["NoNewPrivs"].strip() == "1"


def test_kept_capability_is_effective_and_nothing_else():
    done = run(["cat", "/proc/self/status"], PP.Policy.default(caps_keep=frozenset({"net_raw"})))
    st = status_fields(done.stdout)
    # control for the test above: the same field reads non-zero when a cap is kept
    assert int(st["CapEff"], 16) == 1 << 13 and int(st["CapBnd"], 16) == 1 << 13


def test_only_the_mapped_ids():
    done = run(["sh", "-c", "cat /proc/self/uid_map; echo --; cat /proc/self/gid_map; echo --; id -u; id -g"])
    uid_map, gid_map, ids = done.stdout.split("--\n")
    # the default policy has a /dev: as bwrap, setup is root of the outer user
    # namespace and the sandbox's ids are mapped onto it in a nested one
    # (the outer map, to the caller's ids, is tests/integration/test_backends_as_bwrap.py's)
    assert uid_map.split() == [str(os.geteuid()), "0", "1"]
    assert gid_map.split() == [str(os.getegid()), "0", "1"]
    assert ids.split() == [str(os.geteuid()), str(os.getegid())]


@pytest.mark.parametrize("fs", ["default", "no_proc"])
def test_nested_user_and_net_namespaces_fail(fs):
    pol = PP.Policy.default()
    if fs == "no_proc":   # DisableUserns must not depend on the sandbox's own /proc
        pol = pol.replace(fs=tuple(op for op in pol.fs if not isinstance(op, PP.Proc)))
    script = "unshare -U true; echo user=$?; unshare -n true; echo net=$?"
    denied = run(["sh", "-c", script], pol)
    assert "user=0" not in denied.stdout and "user=" in denied.stdout, denied
    assert "net=0" not in denied.stdout and "net=" in denied.stdout, denied
    # live control: the switch lets the same command create a user namespace
    allowed = run(["sh", "-c", "unshare -U true; echo user=$?"], pol.replace(allow_nested_userns=True))
    assert "user=0" in allowed.stdout, allowed


def test_init_memory_is_not_readable_by_the_command(init_mode):
    """The pid-1 init is a copy of the caller's memory: undumpable, so the command
    (same uid) cannot read it. Control: the command reads its own environ."""
    done = run(["sh", "-c", "cat /proc/self/environ >/dev/null && echo self=ok; "
                            "cat /proc/1/environ >/dev/null 2>&1; echo init=$?"])
    assert "self=ok" in done.stdout and "init=0" not in done.stdout and "init=" in done.stdout


# ---------------------------------------------------------------- statuses and signals

@pytest.fixture(params=["exec_init", "fork_init"])
def init_mode(request, monkeypatch):
    """Both ways the pid-1 init is made: exec'd from the embedded freestanding program
    (the default where it can run), or kept as a copy of the caller (fallback)."""
    if request.param == "fork_init":
        monkeypatch.setenv(N.NO_EXEC_INIT_ENV, "1")
    else:
        monkeypatch.delenv(N.NO_EXEC_INIT_ENV, raising=False)
        if N.init_fd() < 0:
            need("exec_init", "the embedded init cannot be exec'd here (memfd_noexec or no build)")
    return request.param


def test_init_does_not_keep_the_callers_memory(init_mode):
    done = run(["sh", "-c", "grep VmRSS /proc/1/status; grep VmRSS /proc/self/status"])
    init_kb = int(done.stdout.split()[1])
    with open("/proc/self/status") as f:
        caller_kb = int(next(line for line in f if line.startswith("VmRSS")).split()[1])
    if init_mode == "exec_init":
        assert init_kb < 1024, done.stdout
    else:   # control: the fork-mode init is a copy of this process (COW pages count in RSS)
        assert init_kb > min(caller_kb // 4, 4096), (init_kb, caller_kb)

def test_exit_status_and_signal_returncode(init_mode):
    assert run(["sh", "-c", "exit 7"]).returncode == 7
    assert run(["sh", "-c", "kill -TERM $$"]).returncode == -signal.SIGTERM
    assert run(["sh", "-c", "kill -KILL $$"]).returncode == -signal.SIGKILL


def test_init_forwards_sigterm(init_mode):
    with pysandbox.Popen(["sh", "-c", "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done"],
                         policy=PP.Policy.default(), backend="native", stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 42


def test_exec_failures_are_typed(tmp_path, init_mode):
    with pytest.raises(FileNotFoundError):
        run(["/nonexistent/command"])
    with pytest.raises(FileNotFoundError):
        run(["no-such-command-psb"])
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(PermissionError):
        run([str(script)], PP.Policy.default(ro=[str(tmp_path)]))
    script.chmod(0o755)   # control: executable, it runs
    assert run([str(script)], PP.Policy.default(ro=[str(tmp_path)])).stdout == "hi\n"


# ---------------------------------------------------------------- setup failures

def test_bad_bind_source_is_caught_before_clone(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(PolicyError) as info:
        run(["touch", str(marker)], PP.Policy.default(workdir=tmp_path, ro=[str(tmp_path / "missing")]))
    assert info.value.reason is Reason.BIND_SOURCE_MISSING
    assert not marker.exists()


def test_mount_refused_by_the_kernel(tmp_path, init_mode):
    """mqueue without an ipc namespace of our own: the kernel answers EPERM."""
    marker = tmp_path / "ran"
    base = PP.Policy.default(workdir=tmp_path)
    pol = base.replace(namespaces=base.namespaces - {"ipc"}, fs=base.fs + (PP.Mqueue("/dev/mqueue"),))
    with pytest.raises(SetupError) as info:
        run(["touch", str(marker)], pol)
    err = info.value
    assert err.reason is Reason.SETUP_FAILED and err.stage == "mqueue"
    assert err.errno == 1 and err.filename == "/dev/mqueue"
    assert isinstance(compiled(pol).ops[err.op], pysandbox.plan.MountMqueue)
    assert not marker.exists()
    # control: with its ipc namespace the same mount works and the command runs
    ok = base.replace(fs=base.fs + (PP.Mqueue("/dev/mqueue"),))
    assert run(["touch", str(marker)], ok).returncode == 0 and marker.exists()


def test_write_to_readonly_bind_is_a_setup_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "f").write_text("host")
    (ro / "f").chmod(0o644)
    work = tmp_path / "w"
    work.mkdir()
    marker = work / "ran"
    pol = PP.Policy.default(workdir=work)
    pol = pol.replace(fs=pol.fs + (PP.Bind(str(ro), str(ro), readonly=True), PP.Chmod(str(ro / "f"), 0o600)))
    with pytest.raises(SetupError) as info:
        run(["touch", str(marker)], pol)
    assert info.value.stage == "chmod" and info.value.errno == 30 and info.value.filename == str(ro / "f")
    assert not marker.exists() and (ro / "f").stat().st_mode & 0o777 == 0o644


HELPER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {root!r})
    import pysandbox
    from pysandbox.backends import get_backend
    from pysandbox.backends.base import Launch
    from pysandbox.process import compiled
    marker = sys.argv[1]
    out = {{}}
    pol = pysandbox.Policy.default(workdir=os.path.dirname(marker))
    for how in ("run", "spawn"):
        try:
            if how == "run":
                pysandbox.run(["touch", marker], policy=pol, backend="native")
            else:   # straight to spawn: the clone failure path, not check()'s probe
                get_backend("native").spawn(compiled(pol), Launch(argv=["touch", marker], env=dict(os.environ)))
            out[how] = "ran"
        except pysandbox.SandboxError as exc:
            out[how] = [type(exc).__name__, exc.reason.value, getattr(exc, "stage", None)]
    from pysandbox.backends.native.probe import probe_native
    st = probe_native(pol)
    out["status"] = [st.available, st.reason, {{c.name: c.available for c in st.capabilities}}]
    print(json.dumps(out))
""")


def _outer(setup: str, marker, tmp_path):
    """Run HELPER inside ``unshare -U -r [-m]`` after the shell commands ``setup``."""
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER.format(root=ROOT))
    script = f"{setup} && exec {sys.executable} {helper} {marker}"
    done = subprocess.run(["unshare", "-U", "-r", "-m", "sh", "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_user_namespaces_disabled(tmp_path):
    marker = tmp_path / "ran"
    out = _outer("echo 0 > /proc/sys/user/max_user_namespaces", marker, tmp_path)
    assert out["run"][:2] == ["UserNamespaceUnavailable", Reason.USER_NAMESPACE_UNAVAILABLE.value]
    assert out["spawn"][:2] == ["UserNamespaceUnavailable", Reason.USER_NAMESPACE_UNAVAILABLE.value]
    assert out["status"][0] is False and out["status"][1] == Reason.USER_NAMESPACE_UNAVAILABLE.value
    assert not marker.exists()


def test_proc_not_mountable(tmp_path):
    marker = tmp_path / "ran"
    out = _outer("mount -t tmpfs none /proc/sys", marker, tmp_path)
    assert out["run"] == ["CapabilityUnavailable", Reason.PROC_MOUNT_FAILED.value, "proc"]
    assert out["status"][0] is False and out["status"][1] == Reason.PROC_MOUNT_FAILED.value
    assert out["status"][2]["proc"] is False and out["status"][2]["user"] is True
    assert not marker.exists()
    # control: the same helper without the tmpfs runs the command
    ok = _outer("true", marker, tmp_path)
    assert ok["run"] == "ran" and marker.exists() and ok["status"][0] is True


def test_user_namespace_limit_is_reported_by_clone_not_setup():
    """The native check caches its probe per set of namespaces; a fresh backend probes."""
    be = N.NativeBackend()
    be.check(compiled(PP.Policy.default()))
    assert be._checked and all(v == 0 for v in be._checked.values())


# ---------------------------------------------------------------- lifetime

def _host_pids_with(token: str) -> list[int]:
    return [pid for pid, cmd in processes_with(token) if cmd.startswith(b"sleep\0")]


def test_sigkill_of_the_launcher_kills_the_sandbox(tmp_path, init_mode):
    token = f"{os.getpid() % 1000}.{int(time.time() * 1000) % 100000}1"
    launcher = tmp_path / "launcher.py"
    launcher.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {ROOT!r})
        import pysandbox
        p = pysandbox.Popen(["sh", "-c", "sleep {token} & (sleep {token} &) ; sleep {token}"],
                            policy=pysandbox.Policy.default(), backend="native")
        print(p.pid, flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(launcher)], stdout=subprocess.PIPE, text=True)
    try:
        init = int(proc.stdout.readline())
        assert wait_until(lambda: len(_host_pids_with(token)) == 3), _host_pids_with(token)
        assert os.path.exists(f"/proc/{init}")
        proc.kill()
        proc.wait(timeout=30)
        assert wait_until(lambda: not _host_pids_with(token)), _host_pids_with(token)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_timeout_kills_grandchildren(tmp_path, init_mode):
    token = f"{os.getpid() % 1000}.{int(time.time() * 1000) % 100000}2"
    started = tmp_path / "started"
    script = f"sleep {token} & (setsid sleep {token} &); touch {started}; sleep {token}"
    with pytest.raises(subprocess.TimeoutExpired):
        run(["sh", "-c", script], PP.Policy.default(workdir=tmp_path), timeout=3)
    assert started.exists()   # they did start
    assert wait_until(lambda: not _host_pids_with(token)), _host_pids_with(token)


def _zombies_of(pid):
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] == "Z":
            out.append(int(name))
    return out


def test_no_zombie_and_no_fd_leak_after_1000_launches(init_mode):
    pol = PP.Policy.default()
    run(["true"], pol)
    fds_before = len(settled_fds())
    be = get_backend("native")
    plan = compiled(pol)
    from pysandbox.backends.base import Launch
    env = {"PATH": "/usr/bin:/bin"}
    for i in range(1000):
        if i % 2:
            assert run(["true"], pol, capture_output=False).returncode == 0
        else:
            child = be.spawn(plan, Launch(argv=["true"], env=env))
            _, st = os.waitpid(child.pid, 0)
            assert child.returncode(st) == 0
            child.close()
    assert _zombies_of(os.getpid()) == []
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
    assert len(settled_fds()) == fds_before   # the closer thread's closes done (native/psb_nsref.c)


# ---------------------------------------------------------------- descriptors

def test_only_stdio_and_pass_fds_reach_the_command(tmp_path):
    path = tmp_path / "data"
    path.write_text("passed\n")
    stray = os.open(str(path), os.O_RDONLY)
    os.set_inheritable(stray, True)   # even inheritable descriptors are closed
    passed = os.open(str(path), os.O_RDONLY)
    try:
        done = run(["sh", "-c", "ls /proc/self/fd; echo --; cat /proc/self/fd/%d" % passed], pass_fds=(passed,))
        listed, text = done.stdout.split("--\n")
        fds = sorted(int(x) for x in listed.split())
        # ls's own directory descriptor is the one extra entry
        assert set(fds) - {0, 1, 2, passed} and len(fds) == 5, fds
        assert stray not in fds or stray == passed
        assert passed in fds and text == "passed\n"
        without = run(["ls", "/proc/self/fd"])
        assert str(passed) not in without.stdout.split() or passed <= 3
    finally:
        os.close(stray)
        os.close(passed)


# ---------------------------------------------------------------- mounts

MOUNT_CHECK = textwrap.dedent("""
    import os, sys
    bad = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        point, opts = f[4], f[5].split(",")
        if point == "/" or not any(point.startswith(p) for p in ("/dev", "/proc", "/tmp", sys.argv[1])):
            if "ro" not in opts or "nosuid" not in opts or "nodev" not in opts:
                bad.append((point, opts))
    print(len(bad), bad)
""")


@pytest.mark.parametrize("fallback", [False, True], ids=["mount_setattr", "remount_fallback"])
def test_every_host_submount_is_readonly_nosuid_nodev(fallback, monkeypatch, tmp_path):
    if fallback:
        monkeypatch.setenv(N.NO_MOUNT_SETATTR_ENV, "1")
    else:
        monkeypatch.delenv(N.NO_MOUNT_SETATTR_ENV, raising=False)
        if not N.has_mount_setattr():
            need("mount_setattr", "the kernel lacks mount_setattr")
    work = tmp_path / "w"
    work.mkdir()
    pol = PP.Policy.default(workdir=work)
    ready = get_backend("native")._prepare(compiled(pol))
    assert ready.compiled.no_mount_setattr is fallback
    host_mounts = len(N.read_mountpoints())
    done = run([sys.executable, "-c", MOUNT_CHECK, str(work)], pol)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0 "), done.stdout
    # live control: the rw bind is writable, a submount of / is not
    probe = run(["sh", "-c", f"touch {work}/ok && echo w=ok; touch /sys/fs/x 2>/dev/null; echo sys=$?;"
                             "touch /etc/psb-x 2>/dev/null; echo etc=$?"], pol)
    assert "w=ok" in probe.stdout and "sys=0" not in probe.stdout and "etc=0" not in probe.stdout
    assert (tmp_path / "w" / "ok").exists() and host_mounts >= 1


def test_filesystem_ops(tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("k")
    (tmp_path / "token").write_text("t")
    (tmp_path / "scratch").mkdir()
    sc = str(tmp_path / "scratch")
    src = tmp_path / "from-fd"
    src.write_text("via fd\n")
    fd = os.open(str(src), os.O_RDONLY)
    try:
        base = PP.Policy.default(ro=[str(tmp_path)], hide=[str(tmp_path / "secret"), str(tmp_path / "token")])
        pol = base.replace(hostname="psbhost", fs=base.fs + (
            PP.Tmpfs(sc, size=1 << 20, mode=0o700), PP.Dir(f"{sc}/d", mode=0o711),
            PP.Symlink("d", f"{sc}/l"), PP.File(f"{sc}/data", data=b"inline\n", mode=0o640),
            PP.File(f"{sc}/fromfd", fd=fd), PP.File(f"{sc}/ro", data=b"ro\n", bind=True, readonly=True),
            PP.Chmod(sc, 0o750), PP.RemountRo(sc)))
        script = (f"stat -c '%a %F' {sc} {sc}/d {sc}/data; readlink {sc}/l; cat {sc}/data "
                  f"{sc}/fromfd {sc}/ro; hostname; ls {tmp_path}/secret 2>&1 | head -1; "
                  f"cat {tmp_path}/token >/dev/null 2>&1; echo token=$?; "
                  f"touch {sc}/new 2>/dev/null; echo scratch=$?; ls /dev/pts/ptmx /dev/null >/dev/null && echo dev=ok")
        done = run(["sh", "-c", script], pol)
        lines = done.stdout.splitlines()
        assert lines[:3] == ["750 directory", "711 directory", "640 regular file"], done
        assert lines[3:8] == ["d", "inline", "via fd", "ro", "psbhost"], done
        assert "Permission denied" in lines[8] or lines[8] == "", done
        assert "token=0" not in done.stdout and "scratch=0" not in done.stdout and "dev=ok" in done.stdout
    finally:
        os.close(fd)
    assert (tmp_path / "secret" / "key").read_text() == "k"   # the host is untouched
    assert sorted(os.listdir(tmp_path / "scratch")) == []


def test_as_pid_1_and_no_pid_namespace(init_mode, tmp_path):
    """Without an init the setup child execs the command itself (sharing the caller's
    memory until then, or a private copy in fork mode)."""
    base = PP.Policy.default(workdir=tmp_path)
    pid1 = base.replace(as_pid_1=True)
    assert run(["sh", "-c", "echo $$; exit 5"], pid1).stdout == "1\n"
    assert run(["sh", "-c", "exit 5"], pid1).returncode == 5
    with pytest.raises(FileNotFoundError):
        run(["no-such-command-psb"], pid1)
    nopid = base.replace(namespaces=base.namespaces - {"pid"},
                         fs=tuple(op for op in base.fs if not isinstance(op, PP.Proc)))
    done = run(["sh", "-c", "touch ran; exit 4"], nopid)
    assert done.returncode == 4 and (tmp_path / "ran").exists()


def test_command_starts_with_default_signal_state(init_mode):
    """Python ignores SIGPIPE and SIGXFSZ and has handlers installed; the command must
    start with nothing blocked, no handler, and SIGPIPE/SIGXFSZ back to default
    (control: this process does ignore SIGPIPE). What this process inherited as
    ignored (a test run under nohup: SIGHUP) stays ignored, as with subprocess."""
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    with open("/proc/self/status") as f:
        ours = int(status_fields(f.read())["SigIgn"], 16)
    python_own = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
    assert ours & python_own
    done = run(["cat", "/proc/self/status"])
    st = status_fields(done.stdout)
    assert int(st["SigBlk"], 16) == 0 and int(st["SigIgn"], 16) == ours & ~python_own, st
