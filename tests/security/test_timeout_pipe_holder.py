"""A timed-out session command whose output pipes another command holds: the other one
received them over a unix socket, so they outlive the timed-out command and its whole
tree, and EOF never comes. ``run(timeout=...)`` still returns in bounded time (its
keeper ended the command's tree; what it wrote is read for at most
``lifecycle.DRAIN_AFTER_END`` more seconds), on the lean path
(pysandbox/session_run.py) and the Popen one (``input=``: pysandbox/process.py
``run_process``). Live control: the holder reports the two descriptors it holds.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import pysandbox
from pysandbox.session import Sandbox
from tests.support import bounded

pytestmark = pytest.mark.requires("userns")

BOUND = 30.0   # seconds: timeout 1 s + grace 0.3 s + the drain + setup, on a busy machine

HOLDER = r'''
import os, socket, time
s = socket.socket(socket.AF_UNIX)
s.bind("/tmp/holder.sock")
s.listen(1)
c, _ = s.accept()
msg, fds, _, _ = socket.recv_fds(c, 16, 4)
with open("/tmp/held", "w") as f:
    f.write(str(len(fds)))
time.sleep(120)
'''

SENDER = r'''
import os, socket, sys, time
for _ in range(400):
    if os.path.exists("/tmp/holder.sock"):
        break
    time.sleep(0.05)
c = socket.socket(socket.AF_UNIX)
c.connect("/tmp/holder.sock")
socket.send_fds(c, [b"x"], [1, 2])
print("sent", flush=True)
time.sleep(120)
'''


@pytest.mark.parametrize("path", ["lean", "popen"])
def test_a_timeout_returns_while_another_command_holds_its_pipes(backend, tmp_path, path):
    kw = {"input": b""} if path == "popen" else {}
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        holder = sb.Popen([sys.executable, "-I", "-c", HOLDER])
        try:
            exc, took = bounded(lambda: sb.run([sys.executable, "-I", "-c", SENDER], capture_output=True,
                                               timeout=1, kill_grace=0.3, **kw), BOUND)
            held = sb.run(["cat", "/tmp/held"], capture_output=True, text=True, timeout=60).stdout
        finally:
            holder.kill()
            holder.wait(timeout=30)
    assert held == "2", held   # live control: the pipes were held by another command
    assert isinstance(exc, subprocess.TimeoutExpired), exc
    assert b"sent" in (exc.stdout or b""), exc.stdout   # what it wrote before is kept
    assert took < BOUND
