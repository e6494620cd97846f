"""Kernel surface the default policy leaves reachable, attacked from inside a sandbox on
both backends (seccomp.py's default filter; THREAT_MODEL: keyrings, io_uring, sockets
no network namespace confines, perf_event_open/bpf/userfaultfd).

Each attempt has its live control: the same probe outside the sandbox (the caller's
session keyring, io_uring and AF_VSOCK work here), and in a sandbox with the opt-in
(network allow: AF_VSOCK sockets can be made; ``allow_io_uring=True``: io_uring works;
``allow_syscalls``: perf_event_open and bpf get the kernel's own E2BIG, userfaultfd a
descriptor). No vsock address is ever connected to: a socket is created and closed at
once, which sends nothing.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

import pysandbox
from pysandbox import Bind, seccomp
from pysandbox.session import Sandbox
from tests.security import bpf_harness, oracles
from tests.support import not_applicable

pytestmark = pytest.mark.requires("userns")

SCRIPT = bpf_harness.KERNEL_SURFACE_SOURCE + r'''
import json
print(json.dumps({"keyring": keyring_probe(), "io_uring": io_uring_probe(), "families": family_probe(),
                  "opt_in": opt_in_probe()}))
'''
GLOBAL = ("vsock", "qipcrtr", "bluetooth", "nfc", "caif", "ieee802154", "socketpair_vsock")


@pytest.fixture(scope="module")
def outside():
    """The probe as a plain child of the test: the live control for every refusal."""
    done = subprocess.run([sys.executable, "-I", "-c", SCRIPT], capture_output=True, timeout=60, check=True)
    res = json.loads(done.stdout.decode().strip().splitlines()[-1])
    key = res["keyring"]
    assert key["session_id"] > 0 and key["read_session"] == 0 and key["add_key"] == 0, key
    assert key["request_key"] == -errno.ENOKEY, key
    return res


def test_keyring_io_uring_and_vsock_refused_in_deny_mode(backend, tmp_path, outside):
    res = oracles.run_probe(SCRIPT, pysandbox.Policy.default(workdir=tmp_path), backend)
    assert res["_returncode"] == 0, res["_stderr"]
    # keyrings: the caller's session keyring (its id, its keys) is out of reach; nothing can be added
    assert res["keyring"] == dict.fromkeys(outside["keyring"], -errno.EPERM)
    # io_uring: "not in this kernel", the answer programs fall back on
    assert res["io_uring"] == dict.fromkeys(outside["io_uring"], -errno.ENOSYS)
    # socket families no network namespace confines
    fam = res["families"]
    assert {k: fam[k] for k in GLOBAL} == dict.fromkeys(GLOBAL, errno.EAFNOSUPPORT)
    assert fam["inet"] == 0 and fam["unix"] == 0 and fam["netlink"] == 0
    if outside["families"]["vsock"] != 0:
        not_applicable(f"socket(AF_VSOCK) fails outside too (errno {outside['families']['vsock']}): "
                       "the refusal above is not proven live here")


def test_controls_network_allow_and_allow_io_uring(backend, tmp_path, outside):
    """The opt-ins give back exactly what they name; the keyring stays refused."""
    policy = pysandbox.Policy.default(workdir=tmp_path, network="allow", allow_io_uring=True)
    res = oracles.run_probe(SCRIPT, policy, backend)
    assert res["_returncode"] == 0, res["_stderr"]
    assert res["keyring"] == dict.fromkeys(outside["keyring"], -errno.EPERM)
    assert res["io_uring"] == outside["io_uring"]
    assert res["families"] == outside["families"]
    if outside["families"]["vsock"] != 0 or outside["io_uring"]["setup"] != 0:
        not_applicable("vsock or io_uring does not work outside the sandbox here: the controls are partial")


def test_io_uring_opt_in_refused_where_it_would_bypass_socket_filters(tmp_path):
    for kwargs in ({}, {"network": "allow", "strict_unix": True}):
        with pytest.raises(pysandbox.PolicyError) as info:
            pysandbox.Policy.default(workdir=tmp_path, allow_io_uring=True, **kwargs)
        assert info.value.reason == pysandbox.Reason.CONFLICTING_OPTIONS


# ---------------------------------------------------------------- perf_event_open, bpf, userfaultfd

@pytest.fixture(scope="module")
def reached(outside):
    """What each opt-in call answers when it reaches the kernel: perf_event_open and bpf
    the kernel's E2BIG (never the filter's EPERM), userfaultfd a descriptor (0); the
    probe outside the sandbox is the live control."""
    got = outside["opt_in"]
    assert got["perf_event_open"] == got["bpf"] == -errno.E2BIG, got
    if got["userfaultfd"] != 0:
        not_applicable(f"userfaultfd(UFFD_USER_MODE_ONLY) fails outside the sandbox ({got['userfaultfd']}): "
                       "the host forbids it, so its opt-in cannot be shown live")
    return got


@pytest.mark.parametrize("network", ["deny", "allow"])
def test_perf_bpf_userfaultfd_refused_by_default(backend, tmp_path, reached, network):
    res = oracles.run_probe(SCRIPT, pysandbox.Policy.default(workdir=tmp_path, network=network), backend)
    assert res["_returncode"] == 0, res["_stderr"]
    assert res["opt_in"] == dict.fromkeys(reached, -errno.EPERM)


@pytest.mark.parametrize("allowed", [("perf_event_open",), ("bpf",), ("userfaultfd",), seccomp.OPT_IN_CALLS],
                         ids=["perf_event_open", "bpf", "userfaultfd", "all"])
def test_allow_syscalls_lets_exactly_the_named_calls_reach_the_kernel(backend, tmp_path, reached, allowed):
    policy = pysandbox.Policy.default(workdir=tmp_path, allow_syscalls=allowed)
    res = oracles.run_probe(SCRIPT, policy, backend)
    assert res["_returncode"] == 0, res["_stderr"]
    assert res["opt_in"] == {k: (v if k in allowed else -errno.EPERM) for k, v in reached.items()}
    # the other refusals stay
    assert res["keyring"]["session_id"] == -errno.EPERM and res["io_uring"]["setup"] == -errno.ENOSYS


def test_session_commands_get_the_same_refusals_and_opt_ins(backend, tmp_path, reached):
    """A session's server runs under the policy's filter, and every command it starts
    inherits it: refused by default, reaching the kernel with the opt-in."""
    for allowed in ((), ("userfaultfd", "bpf")):
        with Sandbox(pysandbox.Policy.default(workdir=tmp_path, allow_syscalls=allowed), backend) as sb:
            done = sb.run([sys.executable, "-I", "-c", SCRIPT], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        res = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert res["opt_in"] == {k: (v if k in allowed else -errno.EPERM) for k, v in reached.items()}, allowed


DEVICE = "/dev/userfaultfd"
DEVICE_PROBE = bpf_harness.USERFAULTFD_DEVICE_SOURCE


def _host_device_opens():
    done = subprocess.run([sys.executable, "-I", "-c", DEVICE_PROBE, DEVICE], capture_output=True, timeout=60,
                          check=True)
    return json.loads(done.stdout)


def test_dev_userfaultfd_is_not_in_the_minimal_dev(backend, tmp_path):
    """/dev/userfaultfd makes the descriptor the refused system call would (ioctl
    USERFAULTFD_IOC_NEW): it is not among the minimal /dev's nodes."""
    if not os.path.exists(DEVICE):
        not_applicable(f"the host has no {DEVICE} (Linux < 5.11 or no CONFIG_USERFAULTFD): nothing to leave out")
    res = oracles.run_probe(DEVICE_PROBE, pysandbox.Policy.default(workdir=tmp_path), backend, args=(DEVICE,))
    assert res["_returncode"] == 0, res["_stderr"]
    assert res["in_dev"] is False and res["open"] == errno.ENOENT, res
    assert {"null", "zero", "tty"} <= set(res["dev"])     # control: the minimal /dev is there


def test_dev_userfaultfd_bound_with_devices_still_refused_unless_allowed(backend, tmp_path):
    """A policy that hands the device over (a bind with ``dev=True``; pybwrap's
    ``--dev-bind /dev /dev``) does not reopen userfaultfd: its ioctl is refused too."""
    host = _host_device_opens() if os.path.exists(DEVICE) else {"open": errno.ENOENT}
    if host["open"] != 0 or host.get("ioc_new") != 0:
        not_applicable(f"{DEVICE} does not make a userfaultfd for this caller outside the sandbox (open "
                       f"{host['open']}, ioctl {host.get('ioc_new')}; mode 0600 root): the device's way cannot be "
                       "shown live")
    base = pysandbox.Policy.default(workdir=tmp_path)
    for allowed, want in (((), errno.EPERM), (("userfaultfd",), 0)):
        policy = base.replace(fs=base.fs + (Bind(DEVICE, "/tmp/uffd", dev=True),), allow_syscalls=allowed)
        res = oracles.run_probe(DEVICE_PROBE, policy, backend, args=("/tmp/uffd",))
        assert res["_returncode"] == 0, res["_stderr"]
        assert (res["open"], res["ioc_new"]) == (0, want), (allowed, res)
    # control: without dev=True the device does not even open (nodev)
    policy = base.replace(fs=base.fs + (Bind(DEVICE, "/tmp/uffd"),), allow_syscalls=("userfaultfd",))
    assert oracles.run_probe(DEVICE_PROBE, policy, backend, args=("/tmp/uffd",))["open"] == errno.EACCES
