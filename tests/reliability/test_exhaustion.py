"""Resource exhaustion in the launcher: out of descriptors (RLIMIT_NOFILE just above
what is open). Each launch either works or fails with EMFILE (a SetupError or an
OSError, as subprocess would), the command never half-runs, and no descriptor leaks;
once the limit is lifted, launches work again."""

from __future__ import annotations

import errno
import os
import resource

import pytest

import pysandbox
from pysandbox.errors import SandboxError
from tests.reliability import leaks

pytestmark = pytest.mark.requires("userns")


def test_out_of_descriptors(backend, tmp_path):
    policy = pysandbox.Policy.default(workdir=str(tmp_path))
    pysandbox.run(["/bin/true"], policy=policy, backend=backend)      # probes done, plan cached
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    outcomes = []
    with leaks.unchanged():
        base = len(os.listdir("/proc/self/fd"))
        for extra in range(12):
            marker = tmp_path / f"m{extra}"
            resource.setrlimit(resource.RLIMIT_NOFILE, (base + extra, hard))
            try:
                done = pysandbox.run(["/bin/sh", "-c", 'echo ran > "$1"; exit 3', "sh", str(marker)],
                                     policy=policy, backend=backend)
                outcomes.append(done.returncode)
                assert done.returncode == 3 and marker.exists()
            except (SandboxError, OSError) as exc:
                outcomes.append(f"errno {exc.errno}")
                assert exc.errno == errno.EMFILE, exc
                assert not marker.exists()
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "errno 24" in outcomes and outcomes[-1] == 3, outcomes   # both sides were reached
