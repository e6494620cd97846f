"""The launcher's own files (pysandbox/launcher_files.py): where the project holds the
Python environment pysandbox runs from, a command cannot change it (a ``.pth`` file there
would run on the host at the caller's next Python start). The control names the
environment as a writable path, and the same write lands."""

from __future__ import annotations

import os
import sys

import pytest

import pysandbox
from pysandbox import launcher_files

pytestmark = pytest.mark.requires("userns")


def _project_holding_the_launcher() -> tuple[str, str]:
    """(project, a launcher tree inside it): the folder above this run's ``sys.prefix``
    (the tree CI and the README's test command make, with its .venv inside)."""
    prefix = os.path.realpath(sys.prefix)
    project = os.path.dirname(prefix)
    if project in ("/", "/usr", "/usr/local") or not os.access(prefix, os.W_OK):
        pytest.skip(f"not applicable here: this run's environment {prefix} is not a writable project's")
    return project, prefix


@pytest.mark.parametrize("named", [False, True])
def test_a_command_cannot_change_the_launchers_environment(backend, named):
    project, prefix = _project_holding_the_launcher()
    target = os.path.join(prefix, f"psb-test-{os.getpid()}-{backend}.pth")
    policy = pysandbox.Policy.default(workdir=project, rw=[prefix] if named else [],
                                      allow_broad_writable=True)
    try:
        done = pysandbox.run(["sh", "-c", f'echo "import os" > {target}'], policy=policy, backend=backend,
                             capture_output=True, timeout=120)
        if named:   # control: the caller named it, the write lands
            assert done.returncode == 0 and os.path.exists(target), done.stderr
        else:
            assert done.returncode != 0 and b"Read-only file system" in done.stderr, done.stderr
            assert not os.path.exists(target)
        assert prefix in launcher_files.paths()
    finally:
        if os.path.exists(target):
            os.unlink(target)


def test_the_rest_of_the_project_stays_writable(backend, tmp_path):
    project, prefix = _project_holding_the_launcher()
    policy = pysandbox.Policy.default(workdir=project, allow_broad_writable=True)
    marker = os.path.join(project, f".psb-test-{os.getpid()}-{backend}")
    try:
        done = pysandbox.run(["sh", "-c", f"echo x > {marker}"], policy=policy, backend=backend, timeout=120)
        assert done.returncode == 0 and os.path.exists(marker)
    finally:
        if os.path.exists(marker):
            os.unlink(marker)
