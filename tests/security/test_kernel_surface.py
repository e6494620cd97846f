"""Kernel surface the default policy leaves reachable, attacked from inside a sandbox on
both backends (seccomp.py's default filter; THREAT_MODEL: keyrings, io_uring, sockets
no network namespace confines).

Each attempt has its live control: the same probe outside the sandbox (the caller's
session keyring, io_uring and AF_VSOCK work here), and in a sandbox with the opt-in
(network allow: AF_VSOCK sockets can be made; ``allow_io_uring=True``: io_uring works).
No vsock address is ever connected to: a socket is created and closed at once, which
sends nothing.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

import pysandbox
from tests.security import bpf_harness, oracles
from tests.support import not_applicable

pytestmark = pytest.mark.requires("userns")

SCRIPT = bpf_harness.KERNEL_SURFACE_SOURCE + r'''
import json
print(json.dumps({"keyring": keyring_probe(), "io_uring": io_uring_probe(), "families": family_probe()}))
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
