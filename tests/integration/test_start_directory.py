"""Where a command starts, as ``subprocess`` decides it (issue 31, item 1): with no
policy, in the caller's directory when the sandbox can see it (else ``/``); a missing
``cwd=`` is one error for a one-shot launch and a session (StartDirectoryMissing: a
PolicyError ``invalid_path`` and a FileNotFoundError), each with its live control."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

import pysandbox
from pysandbox.errors import StartDirectoryMissing

pytestmark = pytest.mark.requires("userns")


@pytest.fixture
def wd():
    """Outside /tmp (the sandbox's /tmp is private), with a subdirectory."""
    path = tempfile.mkdtemp(prefix="pysandbox-test-", dir="/var/tmp")
    os.mkdir(os.path.join(path, "sub"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_policy_starts_in_the_callers_directory(backend, wd, monkeypatch):
    monkeypatch.chdir(os.path.join(wd, "sub"))
    done = pysandbox.run(["sh", "-c", 'pwd; echo "$PWD"'], backend=backend, capture_output=True, text=True,
                         timeout=120)
    assert done.stdout.split() == [os.path.join(wd, "sub")] * 2, done.stderr
    # a directory the sandbox does not show (its /tmp is private): / as before
    private = tempfile.mkdtemp(prefix="pysandbox-test-", dir="/tmp")
    try:
        monkeypatch.chdir(private)
        assert pysandbox.run(["pwd"], backend=backend, capture_output=True, text=True,
                             timeout=120).stdout == "/\n"
    finally:
        os.rmdir(private)


def test_no_policy_sessions_and_pools_start_in_the_callers_directory(backend, wd, monkeypatch):
    """As one-shot runs: a Sandbox or Pool made with no policy starts each command where
    the caller is when it runs it (else /); control: with a policy, its workdir."""
    monkeypatch.chdir(os.path.join(wd, "sub"))
    with pysandbox.Sandbox(backend=backend) as box, pysandbox.Pool(size=1, backend=backend) as pool:
        for run in (box.run, pool.run):
            assert run(["pwd"], capture_output=True, timeout=120).stdout.decode() == os.path.join(wd, "sub") + "\n"
        monkeypatch.chdir(wd)
        for run in (box.run, pool.run):
            assert run(["pwd"], capture_output=True, timeout=120).stdout.decode() == wd + "\n"
        private = tempfile.mkdtemp(prefix="pysandbox-test-", dir="/tmp")
        try:
            monkeypatch.chdir(private)
            for run in (box.run, pool.run):
                assert run(["pwd"], capture_output=True, timeout=120).stdout.decode() == "/\n"
        finally:
            os.rmdir(private)
    with pysandbox.Sandbox(pysandbox.Policy.default(workdir=os.path.join(wd, "sub")), backend=backend) as box:
        assert box.run(["pwd"], capture_output=True, timeout=120).stdout.decode() == os.path.join(wd, "sub") + "\n"


@pytest.mark.parametrize("where", ["nope", "file"])
def test_missing_cwd_is_one_error_for_one_shot_and_sessions(backend, wd, where):
    open(os.path.join(wd, "file"), "w").close()
    policy = pysandbox.Policy.default(workdir=wd)
    errors = []
    with pysandbox.Sandbox(policy, backend=backend) as box:
        for run in (lambda cwd: pysandbox.run(["true"], policy=policy, backend=backend, timeout=120, cwd=cwd),
                    lambda cwd: box.run(["true"], cwd=cwd)):
            with pytest.raises(StartDirectoryMissing) as info:
                run(where)
            errors.append(info.value)
            assert run("sub").returncode == 0   # control: a directory there
    for exc in errors:
        assert isinstance(exc, pysandbox.PolicyError) and isinstance(exc, FileNotFoundError)
        assert exc.reason is pysandbox.Reason.INVALID_PATH and exc.filename == os.path.join(wd, where)
    assert len({type(e) for e in errors}) == 1 and len({e.errno for e in errors}) == 1
