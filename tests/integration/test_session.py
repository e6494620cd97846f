"""Sessions (pysandbox/session.py) and the pool (pysandbox/pool.py), on both backends:
the subprocess surface, what commands share (files) and do not (processes), per-command
cwd/env, timeouts and kill() ending whole trees, close() leaving nothing on the host."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid

import pytest

import pysandbox
from pysandbox import Reason, SessionError
from tests.support import processes_with, wait_until


@pytest.fixture
def sb(backend, tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    with pysandbox.Sandbox(pysandbox.Policy.default(workdir=wd), backend=backend) as box:
        box.workdir = wd
        yield box


def test_run_returns_a_completed_process_and_commands_share_files(sb):
    done = sb.run(["sh", "-c", "echo out; echo err >&2; echo kept > /tmp/shared; exit 3"], capture_output=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
    again = sb.run(["cat", "/tmp/shared"], capture_output=True, text=True)
    assert again.stdout == "kept\n"   # the sandbox's private /tmp lives as long as the session
    sb.run(["sh", "-c", f"echo hi > {sb.workdir}/f"], check=True)
    assert (sb.workdir / "f").read_text() == "hi\n"
    assert sb.backend_name in ("native", "bwrap")


def test_input_check_text_and_signals(sb):
    assert sb.run(["tr", "a-z", "A-Z"], input="abc", capture_output=True, text=True).stdout == "ABC"
    with pytest.raises(subprocess.CalledProcessError) as info:
        sb.run(["false"], check=True)
    assert info.value.returncode == 1
    assert sb.run(["sh", "-c", "kill -TERM $$"]).returncode == -signal.SIGTERM
    proc = sb.Popen(["sleep", "60"])
    proc.terminate()
    assert proc.wait(timeout=30) == -signal.SIGTERM
    proc = sb.Popen(["sleep", "60"])
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_each_command_gets_the_environment_of_its_own_launch(sb, monkeypatch):
    """The session's encoded environment is reused by the launcher's key (EnvCache.keyed,
    pysandbox/session_proto.py EnvEncoder): a changed os.environ, an env= (also the same
    dict changed in place) and another cwd's PWD each reach the next command."""
    show = ["sh", "-c", 'echo "$PSB_SEEN $PWD"']

    def seen(**kw):
        return sb.run(show, capture_output=True, text=True, **kw).stdout.split()

    monkeypatch.setenv("PSB_SEEN", "one")
    assert seen() == ["one", str(sb.workdir)]
    assert seen() == ["one", str(sb.workdir)]   # from the session's cache
    assert seen(cwd="/tmp") == ["one", "/tmp"]
    monkeypatch.setenv("PSB_SEEN", "two")
    assert seen() == ["two", str(sb.workdir)]
    given = {"PSB_SEEN": "three", "PATH": "/usr/bin:/bin"}
    assert seen(env=given) == ["three", str(sb.workdir)]
    given["PSB_SEEN"] = "four"
    assert seen(env=given) == ["four", str(sb.workdir)]
    assert seen() == ["two", str(sb.workdir)]


def test_cwd_env_and_policy_env(sb):
    done = sb.run(["sh", "-c", 'pwd; echo "$PWD $X"'], cwd="/tmp", env={"X": "1", "PATH": "/usr/bin:/bin"},
                  capture_output=True, text=True)
    assert done.stdout == "/tmp\n/tmp 1\n"
    rel = sb.run(["pwd"], cwd="sub/..", capture_output=True, text=True)
    assert rel.stdout.strip() == str(sb.workdir)   # relative: to the policy's working directory
    with pytest.raises(FileNotFoundError):
        sb.run(["true"], cwd="/nonexistent")
    with pytest.raises(FileNotFoundError):
        sb.run(["no-such-command-here"])
    plain = sb.workdir / "not-executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    with pytest.raises(PermissionError):
        sb.run([str(plain)])


def test_pass_fds_and_nothing_else(sb):
    r, w = os.pipe()
    try:
        done = sb.run(["sh", "-c", f"echo via > /proc/self/fd/{w}; ls /proc/self/fd"], pass_fds=(w,), capture_output=True,
                      text=True)
        os.close(w)
        w = -1
        assert os.read(r, 100) == b"via\n"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    fds = sorted(int(x) for x in done.stdout.split())
    # 0-2, the passed one, and ls's own directory descriptor
    assert len(fds) == 5 and fds[:3] == [0, 1, 2]


def test_a_commands_background_processes_end_with_it(sb):
    tag = str(uuid.uuid4().int % 10**12 + 10**12)   # sleep's argument, unique
    pat = f"{tag[:-1]}[{tag[-1]}]"   # a regex that does not match its own command line
    sb.run(["sh", "-c", f"(setsid sh -c 'trap \"\" TERM HUP; exec sleep {tag}' &); sleep 0.2"])
    left = sb.run(["sh", "-c", f"cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '{pat}' || true"],
                  capture_output=True, text=True)
    assert left.stdout.strip() == "0"
    # control: while the command runs, its background process is there
    live = sb.run(["sh", "-c", f"(exec sleep {tag} &); sleep 0.2; "
                                f"cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c '{pat}'"],
                  capture_output=True, text=True)
    assert int(live.stdout.strip()) >= 1


def test_timeout_ends_a_setsid_descendant_that_ignores_sigterm(sb):
    tag = str(uuid.uuid4().int % 10**12 + 10**12)   # sleep's argument, unique
    mark = sb.workdir / "alive"
    script = (f"(setsid sh -c 'trap \"\" TERM; while :; do echo x >> {mark}; sleep 0.05; done' &); "
              f"trap '' TERM; sleep 1000")
    with pytest.raises(subprocess.TimeoutExpired):
        sb.run(["sh", "-c", script], timeout=0.5, kill_grace=0.3)
    size = mark.stat().st_size
    assert size > 0   # control: it was running
    assert not wait_until(lambda: mark.stat().st_size > size, 0.5)
    assert sb.run(["true"]).returncode == 0   # the session lives on
    assert tag


def test_kill_ends_one_command_and_not_the_other(sb):
    a = sb.Popen(["sh", "-c", "sleep 1000 & sleep 1000"])
    b = sb.Popen(["sh", "-c", "read x; echo got $x"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    a.kill()
    assert a.wait(timeout=30) == -signal.SIGKILL
    out, _ = b.communicate(b"y\n", timeout=30)
    assert (b.returncode, out) == (0, b"got y\n")


def test_concurrent_commands_from_threads(sb):
    results = []

    def one(i):
        results.append(sb.run(["sh", "-c", f"echo {i}"], capture_output=True, text=True).stdout.strip())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results, key=int) == [str(i) for i in range(16)]


def test_close_ends_everything_and_later_use_is_refused(backend, tmp_path):
    tag = str(uuid.uuid4().int % 10**12 + 10**12)   # sleep's argument, unique
    box = pysandbox.Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend=backend)
    proc = box.Popen(["sh", "-c", f"exec sleep {tag}"])
    assert wait_until(lambda: processes_with(tag))
    box.close()
    assert wait_until(lambda: not processes_with(tag))
    assert proc.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(SessionError) as info:
        box.run(["true"])
    assert info.value.reason == Reason.SESSION_CLOSED
    box.close()   # idempotent


def test_a_session_needs_a_pid_namespace():
    policy = pysandbox.Policy.default().replace(namespaces=frozenset({"user"}))
    with pytest.raises(pysandbox.PolicyError) as info:
        pysandbox.Sandbox(policy)
    assert info.value.reason == Reason.CONFLICTING_OPTIONS


def test_refused_popen_arguments(sb):
    for bad in ({"shell": True}, {"user": "nobody"}, {"close_fds": False}):
        with pytest.raises(pysandbox.PolicyError):
            sb.Popen(["true"], **bad)


def test_pool_gives_each_command_a_fresh_sandbox(backend, tmp_path):
    with pysandbox.Pool(pysandbox.Policy.default(workdir=tmp_path), size=2, backend=backend) as pool:
        first = pool.run(["sh", "-c", "echo x > /tmp/mark; ls /tmp"], capture_output=True, text=True)
        second = pool.run(["ls", "/tmp"], capture_output=True, text=True)
        assert "mark" in first.stdout.split() and "mark" not in second.stdout.split()
        proc = pool.Popen(["sh", "-c", "exit 7"])
        assert proc.wait(timeout=30) == 7
        stats = pool.stats()
        assert stats["used"] == 3 and stats["failures"] == 0
    with pytest.raises(SessionError):
        pool.run(["true"])


def test_pool_stages_ahead_and_a_warmed_sandbox_holds_nothing_of_the_warm_up(backend, tmp_path):
    """The pool stages ahead of demand (stats' ``ready`` reaches ``size`` with no call made)
    and warms each sandbox (Sandbox.warm: a first keeper and command that cannot start);
    the warm-up leaves no process: a command sees the same processes in a pooled, a
    warmed and a bare sandbox, and the same listing sees one left running, with its keeper
    (the control)."""
    policy = pysandbox.Policy.default(workdir=tmp_path)

    def count(run) -> int:   # the shell's own glob: no process of the listing's but the shell
        return len(run(["sh", "-c", "echo /proc/[0-9]*"], capture_output=True, text=True).stdout.split())

    with pysandbox.Pool(policy, size=3, backend=backend) as pool:
        assert wait_until(lambda: pool.stats()["ready"] == 3, 120), pool.stats()
        stats = pool.stats()
        assert (stats["staging"], stats["staged"], stats["used"]) == (0, 3, 0)
        pooled = count(pool.run)
    with pysandbox.Sandbox(policy, backend=backend) as box:
        bare = count(box.run)
        box.warm()
        warmed = count(box.run)
        left = box.Popen(["sleep", "60"])
        control = count(box.run)
        left.kill()
        left.wait(timeout=30)
    assert pooled == bare == warmed and control == bare + 2   # sleep and its keeper


def test_a_timeout_before_the_command_started_still_ends_it(sb):
    """``run`` does not wait for its command's start (SPAWN_QUIET: one event, its end), so a
    timeout may reach the server before the command exists: SIGKILL then ends the keeper
    and whatever it started, and the run raises TimeoutExpired. Live control: the same
    listing sees a command left running."""
    def count() -> int:
        return len(sb.run(["sh", "-c", "echo /proc/[0-9]*"], capture_output=True, text=True).stdout.split())

    bare = count()
    for timeout in (0.0, 0.0001, 0.001):
        with pytest.raises(subprocess.TimeoutExpired):
            sb.run(["sleep", "60"], timeout=timeout, kill_grace=0.1)
    assert count() == bare
    left = sb.Popen(["sleep", "60"])
    assert count() == bare + 2   # the control: the command and its keeper
    left.kill()
    left.wait(timeout=30)


def test_pool_reports_a_refill_that_cannot_work(tmp_path):
    policy = pysandbox.Policy.default(workdir=tmp_path)
    with pysandbox.Pool(policy, size=1, backend="no-such-backend") as pool:
        with pytest.raises(Exception) as info:
            pool.run(["true"])
        assert getattr(info.value, "reason", None) is not None


def test_exec_errors_follow_the_one_shot_rule(sb, backend):
    """A session's exec over PATH gives what a one-shot launch gives (native/psb_child.c):
    an unsearchable directory on PATH is a miss (FileNotFoundError, as in a shell), a
    file that is there but not executable is PermissionError, a name with a '/' its own
    error."""
    locked, bin_dir = sb.workdir / "locked", sb.workdir / "bin"
    locked.mkdir(mode=0o000)
    bin_dir.mkdir()
    (bin_dir / "plain").write_text("#!/bin/sh\n")
    (bin_dir / "plain").chmod(0o644)
    env = {"PATH": f"{locked}:{bin_dir}:/usr/bin:/bin"}
    policy = pysandbox.Policy.default(workdir=sb.workdir)
    try:
        for run in (sb.run, lambda argv, **kw: pysandbox.run(argv, policy=policy, backend=backend, **kw)):
            assert run(["true"], env=env).returncode == 0                      # control: PATH works
            with pytest.raises(FileNotFoundError):
                run([f"no-such-command-{os.getpid()}"], env=env)
            with pytest.raises(PermissionError):
                run(["plain"], env=env)                                         # searched, there, not executable
            with pytest.raises(PermissionError):
                run([str(bin_dir)], env=env)                                    # a directory named by path
    finally:
        locked.chmod(0o755)
