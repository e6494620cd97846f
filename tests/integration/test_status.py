"""status(): per backend, capability and network mode; cached; probes leave nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pysandbox
from pysandbox import probe
from pysandbox.backends.bwrap import BwrapBackend
from pysandbox.errors import PolicyError
from pysandbox.status import Status, status

CAPS = {"user", "mount", "pid", "proc", "net", "loopback"}


@pytest.mark.requires("bwrap")
def test_bwrap_status_shape():
    st = status(backend="bwrap")
    assert isinstance(st, Status)
    assert st.available and st.backend == "bwrap" and st.reason is None
    bs = st.backends["bwrap"]
    assert {c.name for c in bs.capabilities} == CAPS
    assert all(c.available for c in bs.capabilities)
    assert set(st.network) == {"deny", "allow", "proxy"}
    assert st.network["deny"].available and st.network["allow"].available and st.network["proxy"].available
    assert bs.info["path"] == os.path.realpath(bs.info["path"]) and bs.info["version"]
    assert status(backend="bwrap") is st     # cached per process
    json.dumps(st.to_dict())


def test_auto_reports_every_backend_and_picks_like_select_backend():
    st = status()
    assert set(st.backends) == {"native", "bwrap"}
    first_ok = next((n for n in ("native", "bwrap") if st.backends[n].available), "native")
    assert st.backend == first_ok
    assert st.available == st.backends[first_ok].available


@pytest.mark.requires("bwrap")
def test_policy_network_mode_is_reported(tmp_path):
    allow = status(pysandbox.Policy.default(workdir=str(tmp_path), network="allow"), backend="bwrap")
    assert allow.available and allow.network_mode == "allow"
    proxy = status(pysandbox.Policy.default(workdir=str(tmp_path), network="proxy", allow_hosts=("pypi.org",)),
                   backend="bwrap")
    assert proxy.available and proxy.network_mode == "proxy"
    assert proxy.network["allow"].available   # the other modes are still answered


def test_unknown_backend_is_a_policy_error():
    with pytest.raises(PolicyError):
        status(backend="chroot")


def test_missing_bwrap_is_reported_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSANDBOX_BWRAP", str(tmp_path / "nowhere"))
    st = status(backend="bwrap")
    assert not st.available and st.reason == "bwrap_not_found"
    assert all(c.reason == "bwrap_not_found" for c in st.backends["bwrap"].capabilities)
    assert st.network["deny"].reason == "bwrap_not_found"


@pytest.mark.requires("bwrap")
def test_cli_status_json_and_table():
    done = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--backend", "bwrap", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["available"] is True and got["backend"] == "bwrap"
    assert {c["name"] for c in got["backends"]["bwrap"]["capabilities"]} == CAPS
    table = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--backend", "bwrap"],
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "network deny" in table.stdout and "loopback" in table.stdout
    missing = subprocess.run([sys.executable, "-m", "pysandbox", "status", "--backend", "bwrap"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYSANDBOX_BWRAP": "/nonexistent/bwrap"})
    assert missing.returncode == 1 and "bwrap_not_found" in missing.stdout


def _children() -> list[str]:
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        found.append(entry)
            except OSError:
                pass
    return found


@pytest.mark.requires("bwrap")
def test_probes_leave_nothing_behind(tmp_path):
    probe.clear_caches()
    before_fds = sorted(os.listdir("/proc/self/fd"))
    with open("/proc/self/mountinfo") as f:
        before_mounts = f.read()
    before_tmp = set(os.listdir(tmp_path))
    backend = BwrapBackend()   # fresh: nothing cached
    st = backend.status(pysandbox.Policy.default(workdir=str(tmp_path)))
    assert st.available     # control: the probes really ran
    assert sorted(os.listdir("/proc/self/fd")) == before_fds
    with open("/proc/self/mountinfo") as f:
        assert f.read() == before_mounts
    assert set(os.listdir(tmp_path)) == before_tmp
    assert _children() == []


def test_the_bwrap_gate_agrees_with_a_real_launch(tmp_path, monkeypatch):
    """The tests' bwrap gate (tests/support.host_capability, what `requires("bwrap")`
    reads) says what a real launch does: where it says "available", a command runs on
    the bwrap backend; where it gives a reason, the launch fails with that reason. The
    negative twin is made here: a bwrap that is not there ($PYSANDBOX_BWRAP)."""
    import importlib

    from tests.support import host_capability
    status_mod = importlib.import_module("pysandbox.status")

    def launch():
        return pysandbox.run(["true"], policy=pysandbox.Policy.default(workdir=None),
                             backend="bwrap").returncode

    gate = host_capability.__wrapped__       # the gate's own code, not its per-run cache
    status_mod.clear_cache()
    why = gate("bwrap")
    if why is None:
        assert launch() == 0
    else:
        with pytest.raises(pysandbox.SandboxError) as err:
            launch()
        assert err.value.reason.value in why
    missing = tmp_path / "no-bwrap-here"
    monkeypatch.setenv("PYSANDBOX_BWRAP", str(missing))
    status_mod.clear_cache()
    try:
        why = gate("bwrap")
        assert why is not None and "bwrap_not_found" in why
        with pytest.raises(pysandbox.BackendUnavailable) as err:
            launch()
        assert err.value.reason.value == "bwrap_not_found"
    finally:
        monkeypatch.delenv("PYSANDBOX_BWRAP")
        status_mod.clear_cache()


def test_host_facts_agree_with_unshare():
    from tests.support import host_capability
    st = status(backend="bwrap")
    assert st.host["userns"] == (host_capability("userns") is None)
    assert st.host["netns"] == (host_capability("netns") is None)
