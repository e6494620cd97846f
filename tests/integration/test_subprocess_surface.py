"""check_output, call, check_call and cwd= in real sandboxes, on every backend (the
``backend`` fixture), against subprocess's own semantics."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile

import pytest

import pysandbox
from tests.support import python_in_sandbox

PY = python_in_sandbox()


@pytest.fixture
def wd():
    """A workdir outside /tmp (the sandbox has a private /tmp) with a subdirectory."""
    path = tempfile.mkdtemp(prefix="pysandbox-test-", dir="/var/tmp")
    os.mkdir(os.path.join(path, "sub"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_check_output_returns_stdout_and_raises_with_it(backend, wd):
    policy = pysandbox.Policy.default(workdir=wd)
    assert pysandbox.check_output(["sh", "-c", "echo out; echo err >&2"], policy=policy, backend=backend,
                                  stderr=subprocess.DEVNULL, timeout=120) == b"out\n"
    assert pysandbox.check_output(["sh", "-c", "echo err >&2"], policy=policy, backend=backend,
                                  stderr=pysandbox.STDOUT, text=True, timeout=120) == "err\n"
    with pytest.raises(pysandbox.CalledProcessError) as info:
        pysandbox.check_output(["sh", "-c", "echo partial; exit 3"], policy=policy, backend=backend, timeout=120)
    assert info.value.returncode == 3 and info.value.output == b"partial\n"


def test_check_output_input_none_is_empty_input_as_subprocess(backend, wd):
    policy = pysandbox.Policy.default(workdir=wd)
    # input=None: the command reads EOF at once (not the caller's stdin); input="x": live control
    assert pysandbox.check_output(["cat"], policy=policy, backend=backend, input=None, text=True,
                                  timeout=120) == ""
    assert pysandbox.check_output(["cat"], policy=policy, backend=backend, input="x", text=True,
                                  timeout=120) == "x"


def test_call_and_check_call_follow_subprocess(backend, wd):
    policy = pysandbox.Policy.default(workdir=wd)
    assert pysandbox.call(["sh", "-c", "exit 7"], policy=policy, backend=backend, timeout=120) == 7
    assert pysandbox.call(["sh", "-c", "kill -TERM $$"], policy=policy, backend=backend,
                          timeout=120) == -signal.SIGTERM
    assert pysandbox.check_call(["true"], policy=policy, backend=backend, timeout=120) == 0
    with pytest.raises(pysandbox.CalledProcessError) as info:
        pysandbox.check_call(["sh", "-c", "exit 5"], policy=policy, backend=backend, timeout=120)
    assert info.value.returncode == 5 and info.value.output is None


def test_call_timeout_ends_the_sandbox(backend, wd):
    policy = pysandbox.Policy.default(workdir=wd)
    with pytest.raises(pysandbox.TimeoutExpired):
        pysandbox.call(["sleep", "600"], policy=policy, backend=backend, timeout=1)


@pytest.mark.parametrize("cwd, want", [
    ("sub", "{wd}/sub"), ("{wd}/sub/..", "{wd}"), ("/usr/lib", "/usr/lib"), ("/tmp", "/tmp"), ("/", "/"),
])
def test_cwd_is_the_start_directory_inside_the_sandbox(backend, wd, cwd, want):
    policy = pysandbox.Policy.default(workdir=wd)
    out = pysandbox.check_output(["sh", "-c", 'pwd; echo "$PWD"'], policy=policy, backend=backend,
                                 cwd=cwd.format(wd=wd), text=True, timeout=120)
    want = want.format(wd=wd)
    assert out == f"{want}\n{want}\n"


def test_cwd_finds_a_relative_command_there(backend, wd):
    script = os.path.join(wd, "sub", "hello")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho hello from sub\n")
    os.chmod(script, 0o755)
    policy = pysandbox.Policy.default(workdir=wd)
    assert pysandbox.check_output(["./hello"], policy=policy, backend=backend, cwd="sub", text=True,
                                  timeout=120) == "hello from sub\n"
    with pytest.raises(FileNotFoundError):   # control: not found from the workdir itself
        pysandbox.run(["./hello"], policy=policy, backend=backend, timeout=120)


def test_cwd_grants_nothing(backend, wd):
    """A start directory in the read-only root stays read-only; the workdir (live control)
    stays writable."""
    policy = pysandbox.Policy.default(workdir=wd)
    code = "import os, sys\ntry:\n    open('psb-probe', 'w').close()\nexcept OSError as e:\n    sys.exit(e.errno)\n"
    ro = pysandbox.run([PY, "-c", code], policy=policy, backend=backend, cwd="/usr", timeout=120)
    assert ro.returncode == 30   # EROFS
    assert not os.path.exists("/usr/psb-probe")
    rw = pysandbox.run([PY, "-c", code], policy=policy, backend=backend, cwd="sub", timeout=120)
    assert rw.returncode == 0 and os.path.exists(os.path.join(wd, "sub", "psb-probe"))


def test_missing_cwd_is_a_policy_error_on_both_backends(backend, wd):
    policy = pysandbox.Policy.default(workdir=wd)
    with pytest.raises(pysandbox.PolicyError) as info:
        pysandbox.run(["true"], policy=policy, backend=backend, cwd="nope", timeout=120)
    assert info.value.reason == pysandbox.Reason.INVALID_PATH
    assert pysandbox.run(["true"], policy=policy, backend=backend, cwd="sub", timeout=120).returncode == 0
