"""Both backends reach the same bar for the command's process: every capability set
empty (bounding set cleared, sandbox root included), no_new_privs, the built-in seccomp
filters loaded, nested user namespaces refused unless the policy allows them."""

from __future__ import annotations

import errno

import pytest

import pysandbox
from tests.security import oracles

pytestmark = pytest.mark.requires("userns")

SCRIPT = oracles.PRELUDE + r'''
import ctypes
fields = {}
with open("/proc/self/status") as f:
    for line in f:
        key, _, value = line.partition(":")
        fields[key] = value.strip()
for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters"):
    RESULTS[key] = fields.get(key)
RESULTS["uid"] = os.getuid()
libc = ctypes.CDLL(None, use_errno=True)
def unshare_user():
    step("unshare")
    if libc.unshare(0x10000000) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt("unshare_user", unshare_user)
done()
'''


@pytest.mark.parametrize("uid", [None, 0])
def test_no_capabilities_nnp_and_filters(backend, tmp_path, uid):
    policy = pysandbox.Policy.default(workdir=tmp_path, uid=uid, gid=uid)
    res = oracles.run_probe(SCRIPT, policy, backend)
    if uid == 0:
        assert res["uid"] == 0
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(res[key], 16) == 0, (key, res[key])
    assert res["NoNewPrivs"] == "1"
    assert res["Seccomp"] == "2"
    if res["Seccomp_filters"] is not None:
        assert int(res["Seccomp_filters"]) >= 1
        strict = oracles.run_probe(SCRIPT, policy.replace(strict_unix=True), backend)
        assert int(strict["Seccomp_filters"]) == int(res["Seccomp_filters"]) + 1
    got = res["unshare_user"]
    assert got["ok"] is False and got["errno"] in (errno.EPERM, errno.ENOSPC, errno.EUSERS), got


def test_nested_userns_control(backend, tmp_path):
    """Control for the refusal above: the policy switch lets the same call succeed."""
    policy = pysandbox.Policy.default(workdir=tmp_path, allow_nested_userns=True)
    try:
        res = oracles.run_probe(SCRIPT, policy, backend)
    except pysandbox.SandboxError as exc:
        pytest.fail(f"allow_nested_userns refused on {backend}: {exc.reason}")
    assert res["unshare_user"]["ok"] is True, res
