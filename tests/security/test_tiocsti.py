"""TIOCSTI into the sandbox's controlling terminal fails, with a new session (default)
and with a shared session (new_session=False, ``--share-session``).

The oracle: the same script run unsandboxed pushes its byte into the terminal
(the host allows TIOCSTI), and inside the sandbox stdin is proven to be the
controlling terminal (TIOCGSID answers only for it) before the attempt.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import termios

import pytest

import pysandbox

pytestmark = pytest.mark.requires("userns")

STI_SCRIPT = r'''
import errno, fcntl, json, os, sys, termios
res = {}
def attempt(label, fn):
    try:
        res[label] = [0, fn()]
    except OSError as exc:
        res[label] = [exc.errno, None]
if sys.argv[1] == "take":
    attempt("setsid", os.setsid)
    attempt("sctty", lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0) and None)
def ctty_is_stdin():
    # TIOCGSID answers only for the caller's controlling terminal (else ENOTTY)
    fcntl.ioctl(0, 0x5429, b"\0\0\0\0")   # TIOCGSID
    return True
attempt("ctty_is_stdin", ctty_is_stdin)
attempt("sti", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"X") and None)
os.set_blocking(0, False)
attempt("read", lambda: os.read(0, 16).decode())
print(json.dumps(res))
'''


def raw_pty():
    """A pty pair, its slave raw (no line editing, no echo)."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~(termios.ICANON | termios.ECHO)
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    return master, slave


def _drain(fd):
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 64)
    except BlockingIOError:
        return b""


def unsandboxed_injection(slave) -> None:
    """The control: unsandboxed, the script makes the pty ``slave`` its terminal and
    injects (skipped where the host refuses TIOCSTI to everyone)."""
    control = subprocess.run([sys.executable, "-I", "-c", STI_SCRIPT, "take"], stdin=slave,
                             capture_output=True, start_new_session=True, timeout=30)
    got = json.loads(control.stdout)
    if got["sti"][0] != 0:
        from tests.support import need
        need("tiocsti", f"TIOCSTI refused outside any sandbox (errno {got['sti'][0]})")
    assert got["sctty"][0] == 0 and got["ctty_is_stdin"] == [0, True] and got["read"] == [0, "X"], got


def test_tiocsti_refused_in_new_session(backend, tmp_path):
    master, slave = raw_pty()
    try:
        unsandboxed_injection(slave)
        master2, slave2 = raw_pty()
        try:
            policy = pysandbox.Policy.default(workdir=tmp_path)
            done = pysandbox.run([sys.executable, "-I", "-c", STI_SCRIPT, "take"], policy=policy, backend=backend,
                                 stdin=slave2, capture_output=False, stdout=subprocess.PIPE, timeout=60)
            res = json.loads(done.stdout)
            # the pty became the sandbox's controlling terminal: TIOCSTI would work but for the filter
            assert res["sctty"][0] == 0 and res["ctty_is_stdin"] == [0, True], res
            assert res["sti"] == [errno.EPERM, None], res
            assert res["read"][1] in (None, ""), res
            assert _drain(slave2) == b""
        finally:
            os.close(master2)
            os.close(slave2)
    finally:
        os.close(master)
        os.close(slave)


SHARED_HELPER = r'''
import fcntl, json, os, sys, termios, subprocess
import pysandbox
slave = int(sys.argv[1]); backend = sys.argv[2]; workdir = sys.argv[3]
os.setsid()
fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
out = {}
try:
    fcntl.ioctl(slave, termios.TIOCSTI, b"C")
    os.set_blocking(slave, False)
    out["control"] = os.read(slave, 16).decode()
    os.set_blocking(slave, True)
except OSError as exc:
    out["control"] = exc.errno
policy = pysandbox.Policy.default(workdir=workdir, new_session=False)
done = pysandbox.run([sys.executable, "-I", "-c", sys.argv[4], "keep"], policy=policy, backend=backend,
                     stdin=slave, stdout=subprocess.PIPE, timeout=60)
out["sandbox"] = json.loads(done.stdout)
print(json.dumps(out))
'''


def test_tiocsti_refused_with_shared_session(backend, tmp_path):
    master, slave = raw_pty()
    try:
        helper = subprocess.run([sys.executable, "-c", SHARED_HELPER, str(slave), backend, str(tmp_path), STI_SCRIPT],
                                pass_fds=(slave,), capture_output=True, timeout=90)
        assert helper.returncode == 0, helper.stderr.decode()
        out = json.loads(helper.stdout)
        if out["control"] != "C":
            from tests.support import need
            need("tiocsti", f"TIOCSTI on the controlling terminal refused outside any sandbox: {out['control']}")
        res = out["sandbox"]
        # the shared session: the caller's terminal is the command's controlling terminal
        assert res["ctty_is_stdin"] == [0, True], res
        assert res["sti"] == [errno.EPERM, None], res
        assert res["read"][1] in (None, ""), res
        assert _drain(slave) == b""
    finally:
        os.close(master)
        os.close(slave)
