"""Mounts the host makes after the launch must not appear in the sandbox (THREAT:
filesystem). A host directory that is a shared mount is bound read-only; while the
command waits on a fifo, the host mounts a tmpfs (read-write, with devices allowed)
under it and writes a file there. The command must not see that file. Live control:
bwrap itself, run directly (it makes / rslave), shows the file, so the probe can see a
propagated mount. Root only: mounting needs it on the host."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pysandbox

pytestmark = pytest.mark.requires("userns")

PROBE = r'''
import os, sys
base, fifo = sys.argv[1], sys.argv[2]
with open(fifo) as f:   # the host mounted and wrote before it opened the fifo for writing
    f.read()
print("SEEN" if os.path.exists(os.path.join(base, "sub", "marker")) else "UNSEEN")
'''


def _mount(*args):
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _exchange(proc, base, fifo) -> str:
    """With the sandbox set up and its probe blocked on the fifo: mount a tmpfs under the
    shared ``base`` on the host, write the marker, release the probe, take its answer."""
    try:
        sub = base / "sub"
        _mount("-t", "tmpfs", "-o", "size=64k", "psb-propagation-test", str(sub))
        try:
            (sub / "marker").write_text("host mount")
            with open(fifo, "w") as f:
                f.write("go")
            out, err = proc.communicate(timeout=60)
        finally:
            subprocess.run(["umount", str(sub)], capture_output=True)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    return out.decode().strip()


def _run(backend, base, fifo, policy):
    # spawn returns once the command runs: the sandbox's mounts are all made
    proc = pysandbox.Popen([sys.executable, "-I", "-c", PROBE, str(base), str(fifo)], policy=policy,
                           backend=backend, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return _exchange(proc, base, fifo)


def _shared_dir(tmp_path):
    base = tmp_path / "shared"
    (base / "sub").mkdir(parents=True)
    _mount("--bind", str(base), str(base))
    _mount("--make-shared", str(base))
    return base


def _with_shared_dir(tmp_path, fn):
    if os.geteuid() != 0:
        pytest.skip("mounting on the host needs root")
    base = _shared_dir(tmp_path)
    try:
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        got = fn(base, fifo)
        assert not os.path.exists(base / "sub" / "marker")   # unmounted again
        return got
    finally:
        subprocess.run(["umount", "-l", str(base)], capture_output=True)


@pytest.mark.parametrize("as_pid_1", [False, True])
def test_host_mount_after_launch_is_not_received(backend, tmp_path, as_pid_1):
    policy = pysandbox.Policy.default(ro=[str(tmp_path)], as_pid_1=as_pid_1)
    got = _with_shared_dir(tmp_path, lambda base, fifo: _run(backend, base, fifo, policy))
    assert got == "UNSEEN"


class _Bwrap:
    """bwrap itself with a read-only bind of tmp_path, as a Popen for _run."""

    def __init__(self, tmp_path):
        self.args = ["/usr/bin/bwrap", "--unshare-user", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/",
                     "--proc", "/proc", "--dev", "/dev", "--ro-bind", str(tmp_path), str(tmp_path), "--"]


def test_control_bwrap_itself_receives_the_host_mount(tmp_path):
    if not os.path.exists("/usr/bin/bwrap"):
        pytest.skip("no /usr/bin/bwrap")
    prefix = _Bwrap(tmp_path).args

    def run(base, fifo):
        proc = subprocess.Popen([*prefix, sys.executable, "-I", "-c", PROBE, str(base), str(fifo)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # bwrap has set up its mounts once it runs the probe, which blocks on the fifo
        from tests.support import processes_with, wait_until
        if not wait_until(lambda: any(cmd.startswith(sys.executable.encode() + b"\0")
                                      for _pid, cmd in processes_with(str(fifo)))):
            proc.kill()
            proc.wait()
            pytest.fail("bwrap's probe never started")
        return _exchange(proc, base, fifo)
    assert _with_shared_dir(tmp_path, run) == "SEEN"
