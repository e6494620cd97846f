"""No run of any policy creates, changes or leaves anything on the host besides what the
command writes: the mount table, every host directory a policy touches, the temporary
directory, the caller's descriptors and children (the differential corpus, plus the
security-relevant policies of this suite)."""

from __future__ import annotations

import os
import socket
import sys
import tempfile

import pytest

import pysandbox
from pysandbox.policy import fs_dest
from tests.support import hostcheck, settled_fds
from tests.support.policy_corpus import CASES
from tests.support.world import World

pytestmark = pytest.mark.requires("userns")
RETRIES = 5   # the temporary directory is shared with every process on the host

EXTRA = [
    ("strict-unix", lambda w: pysandbox.Policy.default(workdir=w.path("src"), strict_unix=True)),
    ("share-session", lambda w: pysandbox.Policy.default(workdir=w.path("src"), new_session=False)),
    ("allow-network", lambda w: pysandbox.Policy.default(workdir=w.path("src"), network="allow")),
    ("masked-authority", lambda w: pysandbox.Policy.default(workdir=w.path("src"), ro=[w.path("srcB")])),
    ("kept-authority", lambda w: pysandbox.Policy.default(workdir=w.path("src"), ro=[w.path("srcB")],
                                                          keep_authority_sockets=True)),
]


def _fds():
    return sorted(settled_fds())


def _children():
    me = str(os.getpid())
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                out.append(int(entry))
    return out


def _noise_only(changes_delta, policy) -> bool:
    """Changes confined to the shared temporary directory and naming nothing of the
    policy's: possibly another process's; the caller retries to see if they recur."""
    gone, new, dirs = changes_delta
    if gone or new:
        return False
    names = set()
    for op in policy.fs:
        for path in (fs_dest(op), getattr(op, "src", None) or ""):
            names.update(part for part in path.split("/") if part)
    for path, (added, removed) in dirs.items():
        if path not in (tempfile.gettempdir(), "/tmp"):
            return False
        if any(entry[0] in names for entry in added + removed):
            return False
    return True


@pytest.mark.parametrize("name,build", CASES + EXTRA, ids=[c[0] for c in CASES + EXTRA])
def test_host_unchanged(backend, name, build, monkeypatch):
    world = World.create()
    sock = None
    try:
        # a fake authority socket, advertised, inside a read-only bind
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(world.path("srcB/agent.sock"))
        sock.listen(1)
        monkeypatch.setenv("SSH_AUTH_SOCK", world.path("srcB/agent.sock"))
        try:
            policy = build(world)
        except pysandbox.PolicyError as exc:
            pytest.fail(f"corpus case {name} does not build: {exc}")
        for attempt in range(RETRIES + 1):
            fds, children = _fds(), _children()
            before = hostcheck.snapshot(policy, paths=[world.base])
            opened = world.open_fds()
            try:
                done = pysandbox.run([sys.executable, "-I", "-c", "pass"], policy=policy, backend=backend,
                                     capture_output=True, timeout=60)
            except pysandbox.SandboxError as exc:
                done = exc     # a refused policy must leave nothing behind either
            finally:
                world.close_fds(opened)
            after = hostcheck.again(before)
            delta = before.delta(after)
            assert _fds() == fds, f"{name}: descriptors left open"
            assert _children() == children, f"{name}: child processes left"
            if not any(delta):
                break
            if not _noise_only(delta, policy) or attempt == RETRIES:
                pytest.fail(f"{name} on {backend} changed the host: {before.changes(after)} ({done!r})")
    finally:
        if sock is not None:
            sock.close()
        world.remove()
