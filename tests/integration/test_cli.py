"""``pysandbox run`` end to end on every backend: exit codes, flags, signals, timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.integration.test_sandbox import _processes_with
from tests.support import wait_until


def cli(backend, *args, cwd, env=None, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 120)
    return subprocess.run([sys.executable, "-m", "pysandbox", "run", "--backend", backend, *args],
                          cwd=cwd, env=env if env is not None else os.environ, **kwargs)


@pytest.fixture
def wd(tmp_path):
    path = tmp_path / "wd"
    path.mkdir()
    return path


def test_exit_status_passes_through(backend, wd):
    assert cli(backend, "--", "sh", "-c", "exit 7", cwd=wd).returncode == 7
    assert cli(backend, "--", "true", cwd=wd).returncode == 0


def test_killed_by_signal_is_128_plus_n(backend, wd):
    assert cli(backend, "--", "sh", "-c", "kill -KILL $$", cwd=wd).returncode == 128 + 9
    assert cli(backend, "--", "sh", "-c", "kill -TERM $$", cwd=wd).returncode == 128 + 15


def test_not_found_127_and_not_executable_126(backend, wd):
    done = cli(backend, "--", f"no-such-command-{uuid.uuid4().hex}", cwd=wd)
    assert done.returncode == 127
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    (wd / "plain").write_text("#!/bin/sh\n: > ran\n")
    assert cli(backend, "--", "./plain", cwd=wd).returncode == 126
    assert not (wd / "ran").exists()
    (wd / "plain").chmod(0o755)   # control
    assert cli(backend, "--", "./plain", cwd=wd).returncode == 0 and (wd / "ran").exists()


def test_not_found_with_an_unsearchable_path_entry_is_127(backend, wd, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    try:
        env = {**os.environ, "PATH": f"{locked}:/usr/bin:/bin"}
        done = cli(backend, "--", f"no-such-command-{uuid.uuid4().hex}", cwd=wd, env=env)
        assert done.returncode == 127, done.stderr
        assert cli(backend, "--", "true", cwd=wd, env=env).returncode == 0   # control
    finally:
        locked.chmod(0o755)


def test_usage_error_is_2(backend, wd):
    done = cli(backend, "--no-such-flag", "--", "true", cwd=wd)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    done = cli(backend, "--rw", "a/../relative", "--", "true", cwd=wd)   # relative is fine; ".." after a name is not
    assert done.returncode == 2 and "invalid_path" in done.stderr and "Traceback" not in done.stderr


def test_environment_flags(backend, wd):
    env = {**os.environ, "PSB_B": "b", "PSB_C": "c"}
    script = 'echo "${PSB_A-unset}|${PSB_B-unset}|${PSB_C-unset}"'
    done = cli(backend, "--setenv", "PSB_A", "a", "--unsetenv", "PSB_B", "--", "sh", "-c", script, cwd=wd, env=env)
    assert done.stdout.strip() == "a|unset|c"
    done = cli(backend, "--clearenv", "--setenv", "PSB_A", "a", "--", "/bin/sh", "-c", script, cwd=wd, env=env)
    assert done.stdout.strip() == "a|unset|unset"


def test_keep_env_is_an_allow_list(backend, wd):
    env = {**os.environ, "PSB_KEEP": "k", "GITHUB_TOKEN": "secret", "AWS_SECRET_ACCESS_KEY": "secret"}
    script = 'echo "${PSB_KEEP-unset}|${GITHUB_TOKEN-unset}|${AWS_SECRET_ACCESS_KEY-unset}|${PSB_SET-unset}"'
    # by default the caller's secrets do not reach the command (env_secrets.py); control:
    # with --no-hide-credentials they do
    done = cli(backend, "--", "/bin/sh", "-c", script, cwd=wd, env=env)
    assert done.stdout.strip() == "k|unset|unset|unset", done.stderr
    done = cli(backend, "--no-hide-credentials", "--", "/bin/sh", "-c", script, cwd=wd, env=env)
    assert done.stdout.strip() == "k|secret|secret|unset", done.stderr
    done = cli(backend, "--no-hide-credentials", "--keep-env", "PSB_KEEP", "--setenv", "PSB_SET", "s", "--",
               "/bin/sh", "-c", script, cwd=wd, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "k|unset|unset|s", done.stderr
    # a secret the caller names in --keep-env reaches the command
    done = cli(backend, "--keep-env", "PSB_KEEP", "--keep-env", "GITHUB_TOKEN", "--", "/bin/sh", "-c", script,
               cwd=wd, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "k|secret|unset|unset", done.stderr


@pytest.mark.parametrize("where", ["root", "home", "ancestor"])
def test_too_broad_default_workdir_is_refused(backend, tmp_path, where):
    """Started in / or in $HOME or above it, run wants an explicit --workdir (exit 2, the
    reason on one line, nothing run); an explicit --workdir of that home needs
    --allow-broad-writable."""
    home = tmp_path / "a" / "b"
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home)}
    cwd = {"root": "/", "home": home, "ancestor": tmp_path / "a"}[where]
    marker = (tmp_path / "a" if where == "root" else cwd) / "ran"
    done = cli(backend, "--", "sh", "-c", f": > {marker}", cwd=cwd, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "workdir_too_broad" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()
    if where == "root":
        done = cli(backend, "--workdir", "/", "--", "true", cwd=wd_of(tmp_path), env=env)
        assert done.returncode == 2 and "workdir_too_broad" in done.stderr
        return
    # naming the directory is not enough: a home or its ancestor is a too-broad writable
    # path (writable_path_too_broad) ...
    done = cli(backend, "--workdir", str(cwd), "--", "sh", "-c", f": > {marker}", cwd=cwd, env=env)
    assert done.returncode == 2 and "writable_path_too_broad" in done.stderr and not marker.exists()
    # control: ... unless the caller opts in
    done = cli(backend, "--workdir", str(cwd), "--allow-broad-writable", "--", "sh", "-c", f": > {marker}",
               cwd=cwd, env=env)
    assert done.returncode == 0 and marker.exists(), done.stderr
    # a project directory below the home is a fine default
    (home / "proj").mkdir()
    done = cli(backend, "--", "sh", "-c", "pwd", cwd=home / "proj", env=env)
    assert done.returncode == 0 and done.stdout.strip() == str(home / "proj"), done.stderr


def wd_of(tmp_path):
    path = tmp_path / "wd-explicit"
    path.mkdir(exist_ok=True)
    return path


def test_workdir_chdir_and_paths(backend, wd, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    done = cli(backend, "--workdir", str(other), "--", "sh", "-c", "pwd; : > made", cwd=wd)
    assert done.returncode == 0 and done.stdout.strip() == str(other) and (other / "made").exists()
    done = cli(backend, "--no-workdir", "--chdir", "/", "--", "sh", "-c", "pwd; : > /made", cwd=wd)
    assert done.returncode != 0 and done.stdout.strip().splitlines()[0] == "/"
    done = cli(backend, "--tmpfs", "/mnt", "--", "sh", "-c", ": > /mnt/x && echo ok", cwd=wd)
    assert done.stdout.strip() == "ok"


def test_session_is_new_unless_shared(backend, wd):
    # getsid() is 0 when the session leader lives outside the sandbox's pid namespace
    code = "import os; print(os.getsid(0) != 0)"
    assert cli(backend, "--", sys.executable, "-c", code, cwd=wd).stdout.strip() == "True"
    assert cli(backend, "--share-session", "--", sys.executable, "-c", code, cwd=wd).stdout.strip() == "False"


WRITE_FD = (sys.executable, "-c", "import os, sys; os.write(int(sys.argv[1]), b'via-fd\\n')")


def test_pass_fd(backend, wd):
    r, w = os.pipe()
    try:
        done = cli(backend, "--pass-fd", str(w), "--", *WRITE_FD, str(w), cwd=wd, pass_fds=(w,))
        assert done.returncode == 0, done.stderr
        os.close(w)
        w = -1
        assert os.read(r, 100) == b"via-fd\n"
        # control: without --pass-fd the descriptor is not there
        r2, w2 = os.pipe()
        done = cli(backend, "--", *WRITE_FD, str(w2), cwd=wd, pass_fds=(w2,))
        os.close(w2)
        assert done.returncode != 0 and os.read(r2, 100) == b""
        os.close(r2)
    finally:
        os.close(r)
        if w != -1:
            os.close(w)


def test_verbose_names_the_backend(backend, wd):
    done = subprocess.run([sys.executable, "-m", "pysandbox", "--verbose", "run", "--backend", backend, "--", "true"],
                          cwd=wd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"backend {backend}" in done.stderr


def test_timeout_kills_everything(backend, wd):
    token = f"2{uuid.uuid4().int % 10**6:06d}.5"
    done = cli(backend, "--timeout", "3", "--", "sh", "-c", f"sleep {token} & sh -c 'sleep {token}' & wait",
               cwd=wd)
    # SIGTERM ends sh (143); were it ignored, SIGKILL follows (137)
    assert done.returncode in (128 + signal.SIGTERM, 128 + signal.SIGKILL), done.stderr
    assert "timeout" in done.stderr
    assert wait_until(lambda: not _processes_with("sleep\0" + token), 30)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_are_forwarded(backend, wd, sig):
    token = f"1{uuid.uuid4().int % 10**6:06d}.5"
    proc = subprocess.Popen([sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--",
                             "sh", "-c", f"sleep {token} & echo ready; wait"],
                            cwd=wd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert wait_until(lambda: _processes_with("sleep\0" + token), 30)   # control: running
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert code == 128 + sig
    assert wait_until(lambda: not _processes_with("sleep\0" + token), 30)


STUBBORN = r"""
import os, signal, sys, time
# os.write, not print: a print() in a handler re-enters a print() it interrupted.
signal.signal(signal.SIGTERM, lambda n, f: os.write(1, b"ignored %d\n" % n))
print("ready", flush=True)
for _ in range(6000):
    time.sleep(0.1)
"""


def test_timeout_sigterm_then_sigkill(backend, wd):
    token = f"psb-stubborn-{uuid.uuid4().hex}"
    done = cli(backend, "--timeout", "6", "--", sys.executable, "-c", STUBBORN, token, cwd=wd)
    assert done.stdout.split("\n")[:2] == ["ready", "ignored 15"], (done.stdout, done.stderr)
    assert done.returncode == 128 + signal.SIGKILL
    assert wait_until(lambda: not _processes_with(token), 30)


HANDLER = r"""
import signal, sys, time
def on(n, f):
    print("got", n, flush=True)
    sys.exit(7)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on)
print("ready", flush=True)
for _ in range(6000):
    time.sleep(0.1)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_forwarded_signal_reaches_the_command(backend, wd, sig):
    proc = subprocess.Popen([sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--",
                             sys.executable, "-c", HANDLER], cwd=wd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out == f"got {int(sig)}\n"
    assert proc.returncode == 7


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_status_into_a_closed_pipe_is_quiet(extra):
    """``pysandbox status | head -1``: a reader that went away is not a traceback."""
    def into_closed_pipe(argv):
        r, w = os.pipe()
        os.close(r)                       # every write now fails with EPIPE (Python ignores SIGPIPE)
        try:
            return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(w)
    control = into_closed_pipe([sys.executable, "-c", "print('x' * 100, flush=True)"])
    assert "BrokenPipeError" in control.stderr        # the pipe really is closed
    done = into_closed_pipe([sys.executable, "-m", "pysandbox", "status", *extra])
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr
