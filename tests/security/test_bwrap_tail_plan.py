"""The bwrap backend's init reads its setup tail from a sealed memfd
(pysandbox/backends/bwrap/bwrap_tail.py, native/psb_bwrap_init.c). Threat: the command (root
inside, all descendants) must never hold that memfd, and the init must run nothing it was
not given whole and unchangeable: an op array whose memfd is not sealed, or that is
mis-built (a kind outside the tail, a string outside its table, a count that does not
match), fails closed before any op runs and the command never runs. A hostile command
cannot reach the array (it exists before the command does); the mis-built cases stand
for a bug of ours. Each case has a live control: the same launch with the real array."""

from __future__ import annotations

import errno
import fcntl
import os

import pytest

import pysandbox
from pysandbox.backends import bwrap as bwrap_backend
from pysandbox.backends.bwrap import bwrap_tail as T
from pysandbox.backends.native_ops import OP
from pysandbox.errors import SetupError

pytestmark = [pytest.mark.requires("userns"), pytest.mark.requires("bwrap")]

LIST_FDS = "for f in /proc/self/fd/*; do readlink $f || true; done"


def _fds_seen(policy, pass_fds=()):
    done = pysandbox.run(["sh", "-c", LIST_FDS], policy=policy, backend="bwrap", capture_output=True,
                         timeout=60, pass_fds=pass_fds)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().split()


@pytest.mark.parametrize("as_pid_1", [False, True], ids=["fork", "exec"])
def test_the_command_never_holds_the_plan_memfd(as_pid_1):
    policy = pysandbox.Policy.default(workdir=None, as_pid_1=as_pid_1)
    seen = _fds_seen(policy)
    assert not [link for link in seen if "psb-tail-plan" in link], seen
    # live control: a memfd of that name that the command is given is seen as such
    fd = os.memfd_create("psb-tail-plan", 0)
    try:
        seen = _fds_seen(policy, pass_fds=(fd,))
    finally:
        os.close(fd)
    assert [link for link in seen if "memfd:psb-tail-plan" in link], seen


def _launch(tmp_path):
    """The failure of a launch that creates a file (None: it ran)."""
    mark = tmp_path / "ran"
    mark.unlink(missing_ok=True)
    try:
        pysandbox.run(["sh", "-c", f"touch {mark}"], policy=pysandbox.Policy.default(workdir=tmp_path),
                      backend="bwrap", timeout=60)
    except SetupError as exc:
        assert not mark.exists()
        return exc
    assert mark.exists()
    return None


def _unsealed(data: bytes) -> int:
    """The plan memfd with every seal but F_SEAL_WRITE: the launcher could still change it."""
    fd = os.memfd_create("psb-tail-plan", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, T.SEALS & ~fcntl.F_SEAL_WRITE)
    return fd


def test_an_unsealed_plan_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bwrap_backend, "plan_memfd", _unsealed)
    exc = _launch(tmp_path)
    assert exc is not None and exc.errno == errno.EPERM, exc
    monkeypatch.undo()
    assert _launch(tmp_path) is None   # live control: the sealed array runs


def _kind_at(blob: bytes, i: int, kind: int) -> bytes:
    at = T.HEADER.size + i * T.OP_RECORD.size
    return blob[:at] + kind.to_bytes(4, "little") + blob[at + 4:]


def _offset_out(blob: bytes, i: int) -> bytes:
    at = T.HEADER.size + i * T.OP_RECORD.size + 12   # field b
    return blob[:at] + (1 << 30).to_bytes(4, "little") + blob[at + 4:]


def _count_off(blob: bytes) -> bytes:
    nops = int.from_bytes(blob[8:12], "little")
    return blob[:8] + (nops + 1).to_bytes(4, "little") + blob[12:]


@pytest.mark.parametrize("damage", ["kind", "offset", "count"])
def test_a_misbuilt_op_array_fails_closed(damage, tmp_path, monkeypatch):
    real = T.launch_plan

    def misbuilt(plan, binds, **kw):
        blob, compiled = real(plan, binds, **kw)
        ops = compiled.ops
        cover = next(i for i, op in enumerate(ops) if op.kind == "RO_COVER")
        if damage == "kind":      # a mount op of the native child's, not a tail step
            blob = _kind_at(blob, cover, OP["MOUNT"])
        elif damage == "offset":  # a path outside the string table
            blob = _offset_out(blob, cover)
        else:                     # one op more than the memfd holds
            blob = _count_off(blob)
        return blob, compiled

    monkeypatch.setattr(bwrap_backend, "launch_plan", misbuilt)
    exc = _launch(tmp_path)
    assert exc is not None and exc.errno == errno.EINVAL, exc
    monkeypatch.undo()
    assert _launch(tmp_path) is None   # live control
