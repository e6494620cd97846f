"""The bwrap backend's second line against a swapped bind source (THREAT_MODEL.md:
symlinks in paths). The launcher walks every source without following symlinks right
before bwrap starts (test_symlinks.py attacks that on both backends); bwrap 0.8 then
resolves the source itself, so our init also refuses a destination that is not the
inode the launcher validated (``bind_source_changed``; the window between the two is
simulated by a wrong expected inode). Control: the same launch with the right inode."""

from __future__ import annotations

import pytest

import pysandbox
from pysandbox.errors import Reason

pytestmark = pytest.mark.requires("userns")


def _dirs(tmp_path):
    real, other = tmp_path / "real", tmp_path / "other"
    real.mkdir()
    other.mkdir()
    return real, other


def _touch(policy, backend, where):
    return pysandbox.run(["sh", "-c", f"touch {where}/written"], policy=policy, backend=backend, timeout=60,
                         capture_output=True)


def test_bwrap_init_refuses_an_unexpected_inode(tmp_path, monkeypatch):
    """Our init's own check: whatever the launcher validated, a destination that is not
    that inode when the init looks stops the launch before the command runs."""
    from tests.support import host_capability, need
    why = host_capability("bwrap")
    if why is not None:
        need("bwrap", why)
    from pysandbox.backends import bwrap as B
    real, _other = _dirs(tmp_path)
    real_identities = B.bind_identities

    def wrong(plan):
        return [(dest, dev, ino + 1 if dest == str(real) else ino) for dest, dev, ino in real_identities(plan)]
    monkeypatch.setattr(B, "bind_identities", wrong)
    with pytest.raises(pysandbox.SandboxError) as exc:
        _touch(pysandbox.Policy.default(rw=[str(real)]), "bwrap", real)
    assert exc.value.reason == Reason.BIND_SOURCE_CHANGED
    assert not (real / "written").exists()
    monkeypatch.setattr(B, "bind_identities", real_identities)   # control: the true identities pass
    assert _touch(pysandbox.Policy.default(rw=[str(real)]), "bwrap", real).returncode == 0
    assert (real / "written").exists()
