"""Signals: the command cannot signal processes outside the sandbox.

The pid namespace hides every host process, so no pid names one; what is left is a
process group: ``kill(0, sig)`` reaches every member of the sender's group, across pid
namespaces. With a new session (the default) the command's group holds only sandbox
processes. The live control is ``new_session=False`` (``--share-session``), where the
command shares the launcher's group and the same call reaches the launcher: that mode
is for trusted interactive commands, and THREAT_MODEL.md says so.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.requires("userns")

LAUNCHER = r'''
import os, signal, sys
import pysandbox
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
work, backend, share = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
policy = pysandbox.Policy.default(workdir=work, new_session=not share)
command = ("import os, signal; signal.signal(signal.SIGUSR1, signal.SIG_IGN); "
           "print('sending', flush=True); os.kill(0, signal.SIGUSR1)")
done = pysandbox.run([sys.executable, "-I", "-c", command], policy=policy, backend=backend, capture_output=True, timeout=60)
import time
deadline = time.monotonic() + 2   # a signal delivered to another thread is handled a little later
while not got and time.monotonic() < deadline:
    time.sleep(0.01)
print(done.stdout.decode().strip(), "launcher-got" if got else "launcher-untouched", flush=True)
'''


@pytest.mark.parametrize("share", [False, True], ids=["new-session", "shared-session-control"])
def test_process_group_signal_stays_inside(backend, tmp_path, share):
    # The launcher leads its own group (start_new_session), so the test runner is never in it.
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(tmp_path), backend, "1" if share else "0"],
                          capture_output=True, text=True, timeout=120, start_new_session=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    # "sending" comes first: in the shared-session control the signal also reaches bwrap
    # itself (same process group), which may end the sandbox before the command says more.
    words = done.stdout.split()
    assert words[0] == "sending", done.stdout
    assert words[-1] == ("launcher-got" if share else "launcher-untouched"), done.stdout
