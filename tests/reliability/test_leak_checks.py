"""The leak checks themselves: they see what a test made, and only that.

A busy machine's other programs (same user included) mount, unmount and write
/dev/shm meanwhile; the checks must ignore those and still catch ours.
"""

from __future__ import annotations

import os
import uuid

from tests.reliability import leaks
from tests.support import hostcheck


def test_relevant_mount_points():
    watched = {"/tmp", "/var/tmp/psb-work", "/"}
    for ours in ("/", "/tmp", "/run", "/proc", "/var/tmp/psb-work", "/var/tmp/psb-work/sub"):
        assert hostcheck.relevant(ours, watched), ours
    # Other programs' mounts: below / or /tmp (setup points are exact), beside the workdir.
    for theirs in ("/run/netns/x", "/tmp/pytest-of-x/mnt", "/var/tmp/psb-work2", "/media/usb", "/sys/fs/cgroup/x"):
        assert not hostcheck.relevant(theirs, watched), theirs


def test_a_tagged_shm_entry_is_caught_and_another_ignored():
    tag = uuid.uuid4().hex
    ours = f"/dev/shm/{leaks.SHM_TAG}-control-{tag}"
    theirs = f"/dev/shm/other-program-{tag}"
    before = leaks.snapshot()
    try:
        for path in (ours, theirs):
            with open(path, "w"):
                pass
        problems = leaks.diff(before, leaks.snapshot())
    finally:
        for path in (ours, theirs):
            os.unlink(path)
    assert len(problems) == 1 and os.path.basename(ours) in problems[0], problems
    assert os.path.basename(theirs) not in problems[0]


def test_a_mount_at_a_setup_point_is_caught():
    before = hostcheck.snapshot(None)
    root = next(m for m in before.mounts if m[0] == "/")
    fake = hostcheck.HostState(mounts=tuple(m for m in before.mounts if m is not root), listings=before.listings)
    changes = fake.changes(before)
    assert any(c.startswith("mount added: ('/',") for c in changes), changes
