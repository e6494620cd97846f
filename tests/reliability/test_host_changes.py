"""The host changes between two launches of the same policy (long-running embedders).

Plans are compiled once per policy and reused; the host may change meanwhile. A
launch after the change must still be right: a hidden path that no longer exists is
already hidden (the launch runs), and a bind source that vanished is a typed error
before the command runs, never a setup failure disguised as the command's exit
status.
"""

from __future__ import annotations

import os

import pytest

import pysandbox
from pysandbox.errors import SandboxError

pytestmark = pytest.mark.requires("userns")
WRITE = 'echo ran > "$1"'


def test_hidden_file_removed_between_launches(backend, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    secret = data / "secret"
    secret.write_text("s")
    marker = work / "marker"
    policy = pysandbox.Policy.default(workdir=str(work), ro=[str(data)], hide=[str(secret)])
    argv = ["/bin/sh", "-c", WRITE + '; cat "$2" 2>/dev/null; exit 0', "sh", str(marker), str(secret)]
    first = pysandbox.run(argv, policy=policy, backend=backend, capture_output=True, text=True)
    assert (first.returncode, first.stdout) == (0, "") and marker.exists()   # hidden, ran
    marker.unlink()
    secret.unlink()
    try:
        again = pysandbox.run(argv, policy=policy, backend=backend, capture_output=True, text=True)
    except SandboxError as exc:
        pytest.fail(f"a launch after the hidden file went away failed: {exc.reason.value}: {exc}")
    assert again.returncode == 0 and marker.exists(), (again.returncode, again.stderr)


def test_bind_source_removed_between_launches(backend, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    marker = work / "marker"
    policy = pysandbox.Policy.default(workdir=str(work), ro=[str(data)])
    argv = ["/bin/sh", "-c", WRITE, "sh", str(marker)]
    assert pysandbox.run(argv, policy=policy, backend=backend).returncode == 0 and marker.exists()
    marker.unlink()
    os.rmdir(data)
    with pytest.raises(SandboxError) as info:
        done = pysandbox.run(argv, policy=policy, backend=backend, capture_output=True, text=True)
        print("returncode", done.returncode, done.stderr)   # shown when no error was raised
    assert info.value.reason.value in ("bind_source_missing", "setup_failed"), info.value
    assert not marker.exists(), "the command ran without its bind"
