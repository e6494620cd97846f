"""Mount propagation boundary: a mount the host makes after the launch, under a bound
subtree, must not appear inside the sandbox (issue 12 item 8).

The setup makes the host's tree a slave in the sandbox's mount namespace (nothing
propagates out); the sandbox's tree is then made private before the command runs, so
nothing propagates in either (before: a host mount under a read-only bind appeared
inside read-write, with its devices usable).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

import pysandbox

pytestmark = pytest.mark.requires("userns")

BWRAP_LATER = pytest.mark.xfail(strict=False, reason="bwrap side in branch bwrap-life")

CHECK = r'''
import json, os, sys
d = sys.argv[1]
sys.stdin.readline()          # the host has mounted by now
m = os.path.join(d, "m")
points = [l.split()[4] for l in open("/proc/self/mountinfo")]
out = {"mounted_inside": m in points, "sees_host_file": os.path.exists(os.path.join(m, "hostfile"))}
try:
    open(os.path.join(m, "fromsandbox"), "w").close()
    out["write"] = "ok"
except OSError as exc:
    out["write"] = exc.errno
print(json.dumps(out))
'''


def _mount(*args):
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.mark.parametrize("backend", ["native", pytest.param("bwrap", marks=BWRAP_LATER)])
def test_host_mount_after_launch_does_not_propagate_in(backend):
    if os.geteuid() != 0:
        pytest.skip("only root can make a mount on the host (the unprivileged run has nothing to test here)")
    from tests.support import host_capability, need
    if host_capability(backend):
        need(backend, host_capability(backend))
    d = f"/var/tmp/psb-prop-{uuid.uuid4().hex[:12]}"
    os.mkdir(d)
    mounted = []
    proc = None
    try:
        # Our own shared mount: propagation does not depend on how the host set up /.
        _mount("-t", "tmpfs", "-o", "size=1m", "psb-prop", d)
        mounted.append(d)
        _mount("--make-shared", d)
        os.mkdir(os.path.join(d, "m"))
        policy = pysandbox.Policy.default(workdir=None, ro=[d])
        proc = pysandbox.Popen([sys.executable, "-I", "-c", CHECK, d], policy=policy, backend=backend,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # The sandbox is set up (Popen returns once the command was executed).
        _mount("-t", "tmpfs", "-o", "size=1m", "psb-prop-late", os.path.join(d, "m"))
        mounted.append(os.path.join(d, "m"))
        with open(os.path.join(d, "m", "hostfile"), "w") as f:
            f.write("host")
        assert os.path.ismount(os.path.join(d, "m"))   # live control: the host has it
        out, err = proc.communicate(b"go\n", timeout=60)
        import json
        res = json.loads(out.decode().strip().splitlines()[-1])
        assert res["mounted_inside"] is False and res["sees_host_file"] is False, (res, err)
        assert res["write"] != "ok", res   # the read-only bind's own directory, still read-only
        assert not os.path.exists(os.path.join(d, "m", "fromsandbox"))
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", path], capture_output=True)
        os.rmdir(os.path.join(d, "m")) if os.path.isdir(os.path.join(d, "m")) else None
        os.rmdir(d)
