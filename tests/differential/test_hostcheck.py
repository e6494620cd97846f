"""hostcheck notices what it claims to notice (live controls), and nothing when
nothing changed."""

from __future__ import annotations

import os

import pytest

from pysandbox.policy import Bind, Dir, Policy, Tmpfs

from tests.support import hostcheck


def test_unchanged_host_has_no_changes(tmp_path):
    (tmp_path / "src").mkdir()
    policy = Policy(fs=(Bind("/", "/", readonly=True), Bind(str(tmp_path / "src"), "/srv")))
    before = hostcheck.snapshot(policy, paths=[tmp_path])
    assert hostcheck.compare(before) == []
    hostcheck.assert_unchanged(before)


def test_mount_point_created_inside_a_host_bind_is_noticed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    # a tmpfs at /data/sub, /data being the host's src: a backend creating "sub" on
    # the host would change src's listing
    policy = Policy(fs=(Bind(str(src), "/data"), Tmpfs("/data/sub")))
    assert str(src) in hostcheck.touched_dirs(policy)
    before = hostcheck.snapshot(policy)
    (src / "sub").mkdir()
    changes = hostcheck.compare(before)
    assert any(str(src) in c and "sub" in c for c in changes), changes
    with pytest.raises(AssertionError):
        hostcheck.assert_unchanged(before)


def test_literal_destination_on_the_host_is_watched(tmp_path):
    # a backend that forgot the new root would create the destination on the host itself
    dest = tmp_path / "made"
    policy = Policy(fs=(Bind("/", "/", readonly=True), Tmpfs("/tmp"), Dir(str(dest))))
    before = hostcheck.snapshot(policy)
    dest.mkdir()
    assert any("made" in c for c in hostcheck.compare(before))


def test_mode_change_is_noticed(tmp_path):
    (tmp_path / "d").mkdir(mode=0o755)
    policy = Policy(fs=(Bind(str(tmp_path), "/w"),))
    before = hostcheck.snapshot(policy)
    os.chmod(tmp_path / "d", 0o700)
    assert hostcheck.compare(before)


def test_mount_table_change_is_noticed(tmp_path):
    before = hostcheck.snapshot(None)
    fake = hostcheck.HostState(mounts=before.mounts[1:], listings=before.listings)
    changes = fake.changes(before)
    assert any(c.startswith("mount added:") for c in changes), changes
