"""Nothing of the setup's tree stays mounted once the command runs (native/psb_ops.c
psb_op_pivot: one detach takes the setup's base tmpfs and the host root bound at
/oldroot in it): the command's mount table has one root, nothing at /oldroot or
/newroot, and the host's own mounts appear only where the policy bound them.

Control: the same table shows the mounts the setup made on purpose (/proc, /tmp, /dev),
so an empty or unreadable table cannot pass."""

from __future__ import annotations

import pytest

import pysandbox

pytestmark = pytest.mark.requires("userns")


def _mountpoints(backend):
    done = pysandbox.run(["cat", "/proc/self/mountinfo"], backend=backend, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [line.split()[4] for line in done.stdout.splitlines()]


def test_the_setup_tree_is_gone(backend):
    points = _mountpoints(backend)
    assert {"/proc", "/tmp", "/dev"} <= set(points), points   # control: the table is the sandbox's
    assert points.count("/") == 1, points   # nothing stacked under or over the root
    assert not [p for p in points if p.split("/")[1] in ("oldroot", "newroot")], points
