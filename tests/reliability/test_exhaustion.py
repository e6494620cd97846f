"""Resource exhaustion in the launcher: out of descriptors (RLIMIT_NOFILE just above
what is open, raised one at a time until launches work). Each launch either works or
fails with EMFILE (a SetupError or an OSError, as subprocess would), the command never
half-runs, and no descriptor leaks; once the limit is lifted, launches work again.
A failure names where each launch stopped, what was open and which threads ran."""

from __future__ import annotations

import errno
import os
import resource
import threading
import traceback

import pytest

import pysandbox
from pysandbox.errors import SandboxError
from tests.reliability import leaks

pytestmark = pytest.mark.requires("userns")


# How far above what is open the limit may rise: a launch needs about 6 (bwrap: two
# pipes, the arguments' memfd, subprocess's error pipe) to 7 descriptors here; the
# ceiling leaves room for a host whose launch needs more, and a launch that never
# works below it fails the test.
MAX_EXTRA = 48
SUCCESSES = 3   # in a row, to end the climb


def _where(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    return f"{os.path.basename(frame.filename)}:{frame.lineno}" if frame else "?"


def test_out_of_descriptors(backend, tmp_path):
    policy = pysandbox.Policy.default(workdir=str(tmp_path))
    pysandbox.run(["/bin/true"], policy=policy, backend=backend)      # probes done, plan cached
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    outcomes = []
    with leaks.unchanged():
        before = sorted(leaks.open_fds())
        base = len(before)
        for extra in range(MAX_EXTRA):
            marker = tmp_path / f"m{extra}"
            resource.setrlimit(resource.RLIMIT_NOFILE, (base + extra, hard))
            try:
                done = pysandbox.run(["/bin/sh", "-c", 'echo ran > "$1"; exit 3', "sh", str(marker)],
                                     policy=policy, backend=backend)
                outcomes.append((extra, done.returncode))
                assert done.returncode == 3 and marker.exists()
            except (SandboxError, OSError) as exc:
                outcomes.append((extra, f"errno {exc.errno} at {_where(exc)}"))
                assert exc.errno == errno.EMFILE, exc
                assert not marker.exists()
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            if [code for _, code in outcomes[-SUCCESSES:]] == [3] * SUCCESSES:
                break
        lifted = pysandbox.run(["/bin/true"], policy=policy, backend=backend)
        assert lifted.returncode == 0
    why = (f"outcomes by descriptors above the {base} open: {outcomes}; open before: {before}; "
           f"threads: {[t.name for t in threading.enumerate()]}")
    assert isinstance(outcomes[0][1], str), why                   # the low side was reached
    assert [code for _, code in outcomes[-SUCCESSES:]] == [3] * SUCCESSES, why   # and the high side


def test_a_session_works_under_a_low_descriptor_limit(backend, tmp_path):
    # The session's keeper used to move a command's descriptors to 900 and above on their
    # way to their targets, so a launcher whose soft RLIMIT_NOFILE was below about 964 (a
    # service manager's 512, say) could start the session but no command in it. Now they
    # go just above the highest target. The descriptor passed in sits at 100 (below the
    # limit) and must arrive there; the control is the same command run one-shot.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 256
    if soft < limit:
        pytest.skip(f"the soft descriptor limit is already {soft}")
    policy = pysandbox.Policy.default(workdir=str(tmp_path))
    probe = ["/bin/sh", "-c", "exec head -n1 /proc/self/fd/100"]
    read_end, write_end = os.pipe()
    try:
        os.dup2(read_end, 100)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        with pysandbox.Sandbox(policy, backend=backend) as sb:
            for word in ("first", "second"):
                os.write(write_end, word.encode() + b"\n")
                done = sb.run(probe, pass_fds=(100,), capture_output=True, text=True)
                assert (done.returncode, done.stdout) == (0, word + "\n"), done
        os.write(write_end, b"control\n")
        control = pysandbox.run(probe, policy=policy, backend=backend, pass_fds=(100,),
                                capture_output=True, text=True)
        assert (control.returncode, control.stdout) == (0, "control\n"), control
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in (100, read_end, write_end):
            os.close(fd)
