"""``pysandbox run`` misuse, option by option, on every backend: a policy mistake is exit 2
with its reason and the option named, before any launch; each beside a live control
(the same option with a good value runs). Also: the nested-sandbox hint, --verbose,
the shipped profiles, and ``status``'s text and JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.integration.test_cli import cli

# (bad options, exit, reason, what stderr names, good options: the live control)
TABLE = [
    (["--chdir", "/no/such/dir"], 2, "invalid_path", "--chdir /no/such/dir: no such directory", ["--chdir", "/usr"]),
    (["--chdir", "/etc/passwd"], 2, "invalid_path", "--chdir /etc/passwd: not a directory", ["--chdir", "/etc"]),
    (["--chdir", "relative"], 2, "invalid_path", "--chdir relative", ["--chdir", "/"]),
    (["--chdir", "/proc/no-such-entry"], 2, "invalid_path", "--chdir /proc/no-such-entry", ["--chdir", "/proc/sys"]),
    (["--chdir", "/dev/nope"], 2, "invalid_path", "--chdir /dev/nope", ["--chdir", "/dev/shm"]),
    (["--workdir", "/no/such/dir"], 2, "bind_source_missing", "--workdir /no/such/dir", None),
    (["--workdir", "/etc/passwd"], 2, "invalid_path", "--workdir /etc/passwd: not a directory", None),
    (["--workdir", "/"], 2, "workdir_too_broad", "--workdir", None),
    (["--hide", "/"], 2, "invalid_path", "--hide /:", ["--hide", "/etc/hostname"]),
    (["--hide", "a/../b"], 2, "invalid_path", "--hide a/../b", ["--hide", "relative"]),   # relative: fine
    (["--hide", "{wd}"], 2, "conflicting_options", "hidden", None),
    (["--tmpfs", "/"], 2, "invalid_path", "--tmpfs /:", ["--tmpfs", "/mnt"]),
    (["--tmpfs", "/etc/passwd"], 2, "invalid_path", "--tmpfs /etc/passwd", ["--tmpfs", "/etc"]),
    (["--tmpfs", "/no/such/dir"], 2, "mount_point_missing", "--tmpfs /no/such/dir", None),
    (["--ro", "/no/such/dir"], 2, "bind_source_missing", "--ro /no/such/dir", ["--ro", "/usr"]),
    (["--rw", "/no/such/dir"], 2, "bind_source_missing", "--rw /no/such/dir", None),
    (["--ro", "/proc/self"], 2, "mount_point_missing", "--ro /proc/self", ["--ro", "/proc/sys"]),
    (["--rw", "/proc/sys"], 2, "conflicting_options", "--rw /proc/sys", ["--ro", "/proc/sys"]),
    (["--rw", "/proc", "--allow-broad-writable"], 2, "conflicting_options", "--rw /proc", ["--ro", "/proc"]),
    (["--rw", "/etc"], 2, "writable_path_too_broad", "--rw /etc", ["--ro", "/etc"]),
    (["--setenv", "A=B", "1"], 2, "invalid_value", "environment name", ["--setenv", "A", "1"]),
    (["--unsetenv", "A=B"], 2, "invalid_value", "environment name", ["--unsetenv", "A"]),
    (["--keep-env", "A=B"], 2, "invalid_value", "environment name", ["--keep-env", "PATH"]),
    (["--keep-env", "PATH", "--clearenv"], 2, "conflicting_options", "keep", None),
    (["--allow-io-uring"], 2, "conflicting_options", "allow_io_uring", ["--allow-io-uring", "--network", "allow"]),
    (["--allow-syscall", "ptrace"], 2, "invalid_value", "--allow-syscall ptrace", ["--allow-syscall", "userfaultfd"]),
    (["--pass-fd", "2"], 2, "", "--pass-fd", None),
    (["--timeout", "0"], 2, "", "--timeout", ["--timeout", "60"]),
    (["--network", "proxy", "--allow-host", "bad host"], 2, "", "--allow-host",
     ["--network", "proxy", "--allow-host", "pypi.org"]),
    (["--allow-host", "pypi.org"], 2, "conflicting_options", "--allow-host", ["--network", "proxy", "--allow-host",
                                                                             "pypi.org"]),
    (["--profile", "no-such-profile"], 2, "invalid_value", "--profile no-such-profile", ["--profile", "inspect"]),
]


@pytest.fixture
def wd(tmp_path):
    # under /var/tmp, not /tmp: the default policy's private /tmp would hide a workdir below
    # /tmp from the host-path checks the table exercises (a user's project is not in /tmp)
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(tmp_path)
    path = tempfile.mkdtemp(prefix="psb-cli-errors-", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("bad, code, reason, names, good", TABLE, ids=[" ".join(t[0]) for t in TABLE])
def test_option_misuse_is_a_usage_error_naming_the_option(backend, wd, bad, code, reason, names, good):
    bad = [a.replace("{wd}", wd) for a in bad]
    done = cli(backend, *bad, "--", "sh", "-c", "echo ran", cwd=wd)
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "ran" not in done.stdout and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert reason in line and names in line, line
    assert "plan step" not in line and "native op" not in line
    if good is not None:   # control: the same option, a good value
        ok = cli(backend, *good, "--", "sh", "-c", "echo ran", cwd=wd)
        assert (ok.returncode, ok.stdout.strip()) == (0, "ran"), ok.stderr


@pytest.mark.parametrize("outer", ["pysandbox", "bwrap"])
def test_nested_launch_says_nested(backend, wd, outer):
    """Inside a sandbox that allows no user namespace, the error says 'nested sandbox'
    instead of blaming the host's sysctls; the same launch outside runs (control)."""
    inner = [sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--no-workdir", "--", "true"]
    if outer == "pysandbox":
        outer_cmd = [sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--no-workdir", "--"]
    else:
        from pysandbox.probe import locate_bwrap
        from tests.support import host_capability, need
        why = host_capability("bwrap")
        if why is not None:
            need("bwrap", why)
        outer_cmd = [locate_bwrap(None), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                     "--unshare-user", "--unshare-pid", "--disable-userns", "--"]
        if b"--disable-userns" not in subprocess.run([outer_cmd[0], "--help"], capture_output=True).stdout:
            outer_cmd.remove("--disable-userns")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(outer_cmd + inner, capture_output=True, text=True, timeout=120, cwd=wd, env=env)
    assert done.returncode == 125, (done.returncode, done.stderr)
    assert "nested sandbox:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    control = subprocess.run(inner, capture_output=True, text=True, timeout=120, cwd=wd, env=env)
    assert control.returncode == 0 and "nested" not in control.stderr, control.stderr


def test_verbose_shows_backend_plan_steps_and_timings(backend, wd):
    done = subprocess.run([sys.executable, "-m", "pysandbox", "--verbose", "run", "--backend", backend, "--",
                           "true"], capture_output=True, text=True, timeout=120, cwd=wd)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "plan:" in err and "steps compiled in" in err and "Chdir(path=" in err, err
    assert f"backend {backend}" in err and "checked in" in err and " ms" in err, err
    quiet = cli(backend, "--", "true", cwd=wd)   # control: nothing without --verbose
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.requires("native")
def test_verbose_keeps_the_plan_step_of_a_setup_failure(wd):
    """A setup failure (here: a chdir inside /proc that only the launch can judge) names
    the plan step only under --verbose."""
    pid_dir = "/proc/999999/none"   # a pid directory: left to the launch's chdir
    quiet = cli("native", "--chdir", pid_dir, "--", "true", cwd=wd)
    assert quiet.returncode == 125, quiet.stderr
    assert "plan step" not in quiet.stderr and "chdir" in quiet.stderr
    loud = subprocess.run([sys.executable, "-m", "pysandbox", "run", "-v", "--backend", "native", "--chdir",
                           pid_dir, "--", "true"], capture_output=True, text=True, timeout=120, cwd=wd)
    assert loud.returncode == 125 and "plan step" in loud.stderr, loud.stderr


@pytest.mark.parametrize("name", ["agent", "ci", "inspect"])
def test_shipped_profiles_run_true(backend, wd, name):
    done = cli(backend, "--profile", name, "--", "true", cwd=wd)
    assert done.returncode == 0, done.stderr
    probe = cli(backend, "--profile", name, "--", "sh", "-c", "pwd; touch ./w && echo wrote", cwd=wd)
    assert probe.stdout.splitlines()[0] == wd, probe.stderr
    writes = name != "inspect"
    assert ("wrote" in probe.stdout) == writes and os.path.exists(os.path.join(wd, "w")) == writes
    if writes:
        os.unlink(os.path.join(wd, "w"))


def test_status_text_shows_authority_and_json_numbers(wd):
    text = subprocess.run([sys.executable, "-m", "pysandbox", "status"], capture_output=True, text=True,
                          timeout=300, cwd=wd)
    assert "authority sockets: masked" in text.stdout and "stays reachable" in text.stdout, text.stdout
    raw = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--json"], capture_output=True,
                         text=True, timeout=300, cwd=wd)
    data = json.loads(raw.stdout)
    assert "masked" in data["authority"]
    numbers = {k: v for k, v in data["host"].items() if k.startswith("max_")}
    assert numbers and all(isinstance(v, int) for v in numbers.values()), data["host"]
    allow = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--network", "allow"],
                           capture_output=True, text=True, timeout=300, cwd=wd)
    assert "variables unset none" in allow.stdout    # control: allow masks nothing


def test_a_quiet_launch_imports_nothing_for_logging_or_profiles(wd):
    """--verbose and --profile cost nothing when unused (issue 15's start-up budget):
    a plain launch imports neither logging nor the TOML reader; the control with both
    imports them."""
    code = ("import json, sys\nfrom pysandbox.cli import main\ncode = main(ARGV)\n"
            "print(json.dumps([code, sorted(m for m in ('logging', 'tomllib', 'pysandbox.profile') "
            "if m in sys.modules)]))")
    plain = subprocess.run([sys.executable, "-c", code.replace("ARGV", repr(["run", "--", "true"]))],
                           capture_output=True, text=True, timeout=120, cwd=wd)
    assert json.loads(plain.stdout.splitlines()[-1]) == [0, []], plain.stderr
    loud = subprocess.run([sys.executable, "-c", code.replace(
        "ARGV", repr(["-v", "run", "--profile", "inspect", "--", "true"]))],
        capture_output=True, text=True, timeout=120, cwd=wd)
    assert json.loads(loud.stdout.splitlines()[-1]) == [0, ["logging", "pysandbox.profile", "tomllib"]], loud.stderr
