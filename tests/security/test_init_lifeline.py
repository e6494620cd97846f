"""The bwrap backend's init ends the sandbox when the launcher goes, at any time
(THREAT: lifetime). The init: native/psb_bwrap_init.c (the only one: the native module
that carries it is required).

Why a check at start is not enough: bwrap dies with the launcher's spawning *thread*
(PR_SET_PDEATHSIG), and that thread can exit before the launcher's other threads close
the status pipe's reader. bwrap may then die before our init re-arms its own
PR_SET_PDEATHSIG (so that never fires) while the init's lifeline check still finds the
reader open. Seen once in CI (tests/reliability/test_faults.py, a launcher SIGKILLed
during setup left the init and the command running). Here that state is made
deterministically: the init runs as pid 1 of a pid namespace whose parent (``unshare``)
stays alive, and the test closes the status pipe's reader after the init reported
STARTED. The init must kill every process of the namespace and exit.

Live controls: while the reader is open, the sandbox runs, and a SIGIO sent to the init
(as the command itself could send one) ends nothing."""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

from tests.support import processes_with, wait_until
from tests.support.nsholder import children

pytestmark = pytest.mark.requires("userns")

STARTED = 0x50534201


def _init_head(status_w: int, *, exec_mode: bool = False, gate: int | None = None) -> tuple[list[str], tuple[int, ...]]:
    """The init's argv up to its ``--`` and the descriptors it needs: its sealed op array
    is INIT alone (fork mode) or empty (exec mode), with the launcher's ``gate``."""
    from pysandbox import Policy
    from pysandbox import plan as P
    from pysandbox.backends.bwrap import bwrap_init, bwrap_tail
    from pysandbox.backends.native_ops import COp
    fd = bwrap_init.init_memfd()
    blob, _ = bwrap_tail.pack_plan(P.compile(Policy.default()), [] if exec_mode else [COp("INIT")],
                                   exec_mode=exec_mode, gate=gate)
    plan_fd = bwrap_tail.plan_memfd(blob)
    return [f"/proc/self/fd/{fd}", str(status_w), str(fd), str(plan_fd)], (status_w, fd, plan_fd)


def test_init_ends_the_sandbox_when_the_launcher_goes_after_its_check():
    marker = f"psb-lifeline-{uuid.uuid4().hex}"
    r, w = os.pipe()
    head, passed = _init_head(w)
    command = [sys.executable, "python", "-c", "import time; time.sleep(600)", marker]
    # unshare stays the init's parent (alive: no PR_SET_PDEATHSIG fires); the init is pid 1
    proc = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--", *head, "--",
                             *command], pass_fds=passed, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 60)
        word = os.read(r, 4) if ready else b""
        if word != struct.pack("<I", STARTED):
            proc.kill()
            pytest.fail(f"the init did not start: {word!r} {proc.communicate()[1]!r}")
        assert wait_until(lambda: processes_with(marker)), "the command never appeared"
        inits = children(proc.pid)
        assert len(inits) == 1, inits
        # Live control: the reader is open; a SIGIO to the init (the command can send
        # its pid 1 one) is checked against the pipe and ends nothing.
        os.kill(inits[0], signal.SIGIO)
        time.sleep(0.5)
        assert proc.poll() is None and processes_with(marker), "the sandbox ended with its launcher alive"
        os.close(r)
        r = -1
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher is gone and the sandbox still runs: {processes_with(marker)}")
        assert code == 125, (code, proc.stderr.read())
        assert wait_until(lambda: not processes_with(marker), 10), processes_with(marker)
    finally:
        if r != -1:
            os.close(r)
        for pid, _ in processes_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
