"""Signals: the command cannot signal processes outside the sandbox.

The pid namespace hides every host process, so no pid names one; what is left is a
process group: ``kill(0, sig)`` reaches every member of the sender's group, across pid
namespaces. With a new session (the default) the command's group holds only sandbox
processes. With ``new_session=False`` (``--share-session``) the command shares the
launcher's group; where the kernel has Landlock's signal scope its domain still refuses
the signal. The live control is that mode without a domain (``PYSANDBOX_NO_LANDLOCK=1``,
as on an older kernel), where the same call reaches the launcher: that mode is for
trusted interactive commands, and THREAT_MODEL.md says so.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import host_capability, need

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


CASES = {
    "new-session": (False, False, "launcher-untouched"),
    # Where the kernel has Landlock's signal scope, the command's domain refuses the
    # signal even in the launcher's own group: --share-session no longer hands it out.
    "shared-session-signal-scope": (True, False, "launcher-untouched"),
    # The live control: no domain (PYSANDBOX_NO_LANDLOCK=1), a shared group: it lands.
    "shared-session-control": (True, True, "launcher-got"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_process_group_signal_stays_inside(backend, tmp_path, case):
    share, no_landlock, expect = CASES[case]
    if case == "shared-session-signal-scope":
        why = host_capability("landlock_signal_scope")
        if why is not None:
            need("landlock_signal_scope", why)
    env = dict(os.environ)
    env.pop("PYSANDBOX_NO_LANDLOCK", None)
    if no_landlock:
        env["PYSANDBOX_NO_LANDLOCK"] = "1"
    # The launcher leads its own group (start_new_session), so the test runner is never in it.
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(tmp_path), backend, "1" if share else "0"],
                          capture_output=True, text=True, timeout=120, start_new_session=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    # "sending" comes first: in the shared-session control the signal also reaches bwrap
    # itself (same process group), which may end the sandbox before the command says more.
    words = done.stdout.split()
    assert words[0] == "sending", done.stdout
    assert words[-1] == expect, done.stdout
