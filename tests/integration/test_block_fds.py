"""Policy.block_fd and Policy.userns_block_fd on the native backend (bwrap's --block-fd
and --userns-block-fd), and Popen's on_start hook that makes the second usable: the
caller learns the setup's pid before the setup, writes its id maps, then releases
it. Both hold a live control (the command has not run / no map exists yet) before the
release. The bwrap backend refuses both (its launch waits for the exec)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pysandbox
from pysandbox import policy as PP
from pysandbox.errors import BwrapOptionUnsupported, Reason
from tests.support import write_id_maps

pytestmark = pytest.mark.requires("userns", "native")


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_block_fd_released_from_on_start(pipe):
    r, w = pipe
    got = []

    def on_start(pid):
        # Setup has not finished (it will wait for our byte): the command has not run.
        got.append(pid)

    out = []

    def launch():
        done = pysandbox.run(["sh", "-c", "echo ran; ls /proc/self/fd"], policy=PP.Policy.default(block_fd=r),
                             backend="native", capture_output=True, text=True, timeout=60, on_start=on_start)
        out.append(done)

    t = threading.Thread(target=launch)
    t.start()
    for _ in range(300):                       # bounded: up to 30 s for the clone
        if got:
            break
        time.sleep(0.1)
    assert got, "on_start was never called"
    t.join(0.5)
    assert t.is_alive() and not out            # control: held while nothing is written
    os.write(w, b"x")
    t.join(60)
    assert out and out[0].returncode == 0, out
    lines = out[0].stdout.split()
    assert lines[0] == "ran"
    assert sorted(lines[1:]) == ["0", "1", "2", "3"]   # stdio and ls's own listing: r was closed


def test_userns_block_fd_caller_writes_the_maps(pipe):
    r, w = pipe
    before = []

    def on_start(pid):
        with open(f"/proc/{pid}/uid_map") as f:
            before.append(f.read())            # control: no map of ours was written
        write_id_maps(pid, 0, 0)
        os.write(w, b"1")

    done = pysandbox.run(["sh", "-c", "cat /proc/self/uid_map; id -u; id -g"],
                         policy=PP.Policy.default(userns_block_fd=r, allow_nested_userns=True), backend="native",
                         capture_output=True, text=True, timeout=60, on_start=on_start)
    assert before == [""]
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", str(os.geteuid()), "1", "0", "0"]


def test_userns_block_fd_with_nested_userns_disabled_keeps_the_callers_ids(pipe):
    r, w = pipe

    def on_start(pid):
        write_id_maps(pid, 0, 0)
        os.write(w, b"1")

    done = pysandbox.run(["sh", "-c", "id -u; unshare -U true && echo nested-ok || echo nested-refused"],
                         policy=PP.Policy.default(userns_block_fd=r), backend="native",
                         capture_output=True, text=True, timeout=60, on_start=on_start)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "nested-refused"]


def test_userns_block_fd_unmapped_fails_closed(pipe):
    r, w = pipe
    os.write(w, b"1")   # released at once: nobody maps the ids, setup cannot create its root
    with pytest.raises(pysandbox.SetupError) as info:
        pysandbox.run(["sh", "-c", "echo ran"], policy=PP.Policy.default(userns_block_fd=r), backend="native",
                      capture_output=True, text=True, timeout=60)
    assert info.value.reason == Reason.SETUP_FAILED


def test_setup_waits_for_on_start(tmp_path):
    """The setup goes on only once on_start has returned (as bwrap's parent reads the
    namespaces before releasing its child): a command that exits at once cannot beat
    the caller. on_start dawdles, then leaves a marker; the command reports whether it
    sees it. Control: the namespaces on_start read are the command's own."""
    marker = tmp_path / "on-start-returned"
    seen = {}

    def on_start(pid):
        seen["net"] = os.readlink(f"/proc/{pid}/ns/net")
        time.sleep(0.3)
        marker.write_text("x")

    done = pysandbox.run(["sh", "-c", f"test -e {marker} && echo after || echo before; readlink /proc/self/ns/net"],
                         policy=PP.Policy.default(workdir=tmp_path), backend="native", capture_output=True,
                         text=True, timeout=60, on_start=on_start)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["after", seen["net"]]
    assert seen["net"] != os.readlink("/proc/self/ns/net")


def test_on_start_exception_kills_the_waiting_setup(pipe):
    r, w = pipe
    pids = []

    def on_start(pid):
        pids.append(pid)
        raise RuntimeError("caller gave up")

    with pytest.raises(RuntimeError, match="caller gave up"):
        pysandbox.run(["sh", "-c", "echo ran"], policy=PP.Policy.default(userns_block_fd=r), backend="native",
                      capture_output=True, text=True, timeout=60, on_start=on_start)
    assert pids and not os.path.exists(f"/proc/{pids[0]}")   # killed and reaped


LAUNCHER = textwrap.dedent("""
    import os, sys, pysandbox
    from pysandbox import policy as PP
    r = int(sys.argv[1])
    def on_start(pid):
        print(pid, flush=True)
    pysandbox.run(["true"], policy=PP.Policy.default(userns_block_fd=r), backend="native", on_start=on_start,
                  pass_fds=())
""")


def test_launcher_death_ends_a_waiting_setup(pipe):
    """The block's write end stays open here; only the launcher dies: the waiting setup
    must notice (the lifeline) rather than wait for a release that never comes."""
    r, w = pipe
    os.set_inheritable(r, True)
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(r)], pass_fds=(r,), stdout=subprocess.PIPE,
                                text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert select.select([launcher.stdout], [], [], 60)[0]
        pid = int(launcher.stdout.readline())
        os.kill(pid, 0)                          # control: the setup is there, waiting
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(30)
        for _ in range(300):                     # bounded: up to 30 s
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}"), "the setup outlived its launcher"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.parametrize("field", ["block_fd", "userns_block_fd"])
def test_bwrap_backend_refuses_block_fds(field, pipe):
    from tests.support import host_capability, need
    why = host_capability("bwrap")
    if why is not None:
        need("bwrap", why)
    with pytest.raises(BwrapOptionUnsupported) as info:
        pysandbox.run(["true"], policy=PP.Policy.default(**{field: pipe[0]}), backend="bwrap")
    assert info.value.reason == Reason.BWRAP_OPTION_UNSUPPORTED
