"""Constrained hosts fail closed with their reason (docs/ARCHITECTURE.md, invariant 1).

Each simulated host (tests/support/constrained.py) is checked three ways on each backend:
``status`` names the reason (per capability, per network mode), an API launch raises
the typed error with that reason, and ``pysandbox run`` exits 125 naming it. In every
case the command would create a marker file: it must not exist afterwards. The
``plain`` host is the live control: the same launch there creates the marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pysandbox.errors import Reason, error_for
from tests.support import constrained
from tests.reliability import leaks

pytestmark = pytest.mark.requires("userns")
SNIPPET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_snippet.py")
R = Reason

# (host, backend, network) -> expected reason, or None where the launch must run.
# "auto" rows check the choice between backends.
CASES = [
    ("plain", "native", "deny", None),
    ("plain", "bwrap", "deny", None),
    ("userns_disabled", "native", "deny", R.USER_NAMESPACE_UNAVAILABLE),
    ("userns_disabled", "bwrap", "deny", R.USER_NAMESPACE_UNAVAILABLE),
    ("userns_disabled", "auto", "deny", R.USER_NAMESPACE_UNAVAILABLE),
    ("userns_disabled", "native", "allow", R.USER_NAMESPACE_UNAVAILABLE),
    ("proc_unmountable", "native", "deny", R.PROC_MOUNT_FAILED),
    ("proc_unmountable", "bwrap", "deny", R.PROC_MOUNT_FAILED),
    ("proc_unmountable", "auto", "deny", R.PROC_MOUNT_FAILED),
    ("netns_refused", "native", "deny", R.NETWORK_NAMESPACE_UNAVAILABLE),
    ("netns_refused", "bwrap", "deny", R.NETWORK_NAMESPACE_UNAVAILABLE),
    ("netns_refused", "auto", "deny", R.NETWORK_NAMESPACE_UNAVAILABLE),
    ("netns_refused", "native", "allow", None),
    ("netns_refused", "bwrap", "allow", None),
    ("native_missing", "native", "deny", R.NATIVE_MODULE_MISSING),
    # the native module is required: it carries the bwrap backend's init too (no fallback)
    ("native_missing", "bwrap", "deny", R.BWRAP_INIT_UNAVAILABLE),
    ("native_missing", "auto", "deny", R.NATIVE_MODULE_MISSING),
    ("bwrap_missing", "bwrap", "deny", R.BWRAP_NOT_FOUND),
    ("bwrap_missing", "native", "deny", None),
    ("bwrap_missing", "auto", "deny", None),             # native, no warning
    ("bwrap_not_on_path", "bwrap", "deny", R.BWRAP_NOT_FOUND),
    ("bwrap_setuid", "bwrap", "deny", R.BWRAP_SETUID_REJECTED),
    ("bwrap_old", "bwrap", "deny", R.BWRAP_OPTION_UNSUPPORTED),
    ("bwrap_old_on_path", "bwrap", "deny", R.BWRAP_OPTION_UNSUPPORTED),
    ("bwrap_setuid_on_path", "bwrap", "deny", R.BWRAP_SETUID_REJECTED),
    ("bwrap_old_on_path", "auto", "deny", None),        # native: bwrap's age does not matter
    ("native_missing+bwrap_missing", "auto", "deny", R.NATIVE_MODULE_MISSING),
    ("native_missing+bwrap_missing", "bwrap", "deny", R.BWRAP_NOT_FOUND),
]
# The capability (as status names it) each host-level simulation takes away.
CAPABILITY_OF = {"userns_disabled": "user", "proc_unmountable": "proc", "netns_refused": "net"}
# Backends a case needs on the real host (its positive twin must be possible here).
_NEEDS = {"native": ("native",), "bwrap": ("bwrap",), "auto": ("native", "bwrap")}


def _ids(case):
    host, backend, network, reason = case
    return f"{host}-{backend}-{network}-{reason.value if reason else 'runs'}"


def _need_backends(name):
    from tests.support import host_capability, need
    for cap in _NEEDS[name]:
        why = host_capability(cap)
        if why is not None:
            need(cap, why)


def reasons_in(tree) -> set[str]:
    """Every ``reason`` value anywhere in a status JSON tree."""
    found = set()
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "reason" and isinstance(value, str):
                found.add(value)
            else:
                found |= reasons_in(value)
    elif isinstance(tree, list):
        for value in tree:
            found |= reasons_in(value)
    return found


def workdir(scratch) -> str:
    """The sandbox's writable workdir: beside, not above, the fake bwraps in scratch."""
    path = os.path.join(str(scratch), "work")
    os.makedirs(path, exist_ok=True)
    return path


def probe(host, backend, network, scratch, *extra):
    marker = os.path.join(workdir(scratch), f"marker-{host}-{backend}-{network}")
    done = constrained.run(host, ["-m", "tests.reliability.probe_snippet", backend, network,
                                  workdir(scratch), marker, *extra], scratch=scratch)
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result: stdout={done.stdout!r} stderr={done.stderr!r}"
    out = json.loads(lines[-1])
    assert "unexpected" not in out, out["unexpected"]
    assert "status_exception" not in out, out["status_exception"]
    return out, marker


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_api_and_status(case, tmp_path):
    host, backend, network, reason = case
    _need_backends(backend)
    with leaks.unchanged():
        out, marker = probe(host, backend, network, tmp_path)
    launch, status = out["launch"], out["status"]
    if reason is None:
        assert launch["error"] is None, launch
        assert launch["returncode"] == 0 and launch["ran"], launch
        assert status["available"] is True, status
    else:
        assert launch["reason"] == reason.value, launch
        assert not launch["ran"], "the command ran on a host that cannot sandbox it"
        # one reason, one class (errors.error_for), whichever backend raised it
        assert launch["error"] == type(error_for(reason, "")).__name__, launch
        assert status["available"] is False, status
        assert status["reason"] == reason.value, status
        assert reason.value in reasons_in(status), status
        cap = CAPABILITY_OF.get(host)
        if cap is not None:   # per capability: the one the host lacks is named, with its reason
            for name, bstat in status["backends"].items():
                caps = {c["name"]: c for c in bstat["capabilities"]}
                if bstat["reason"] == R.NATIVE_MODULE_MISSING.value:
                    continue
                assert caps[cap]["available"] is False and caps[cap]["reason"] == reason.value, (name, caps)
    if host == "netns_refused":   # per network mode: deny names the reason, allow works
        assert status["network"]["deny"]["available"] is False, status["network"]
        assert status["network"]["deny"]["reason"] == R.NETWORK_NAMESPACE_UNAVAILABLE.value, status["network"]
        assert status["network"]["allow"]["available"] is True, status["network"]
    if backend == "auto" and reason is None:
        assert out["backend_used"] == "native", out
        assert status["backend"] == "native", status   # status predicts auto's choice
        assert out["warnings"] == [], out
    os.path.exists(marker) and os.unlink(marker)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "plain"], ids=_ids)
def test_cli_run_exit_125(case, tmp_path):
    host, backend, network, reason = case
    _need_backends(backend)
    marker = os.path.join(workdir(tmp_path), "marker-cli")
    args = ["run", "--backend", backend, "--network", network, "--workdir", workdir(tmp_path), "--",
            "/bin/sh", "-c", 'echo ran > "$1"', "sh", marker]
    done = constrained.run_cli(host, args, scratch=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    if reason is None:
        assert done.returncode == 0, done.stderr
        assert os.path.exists(marker)
    else:
        assert done.returncode == 125, (done.returncode, done.stderr)
        assert reason.value in done.stderr, done.stderr
        assert not os.path.exists(marker), "the command ran on a host that cannot sandbox it"


STATUS_CASES = [
    # host, backend, {network mode: expected reason or None (available)}
    ("netns_refused", "native", {"deny": R.NETWORK_NAMESPACE_UNAVAILABLE, "allow": None}),
    ("netns_refused", "bwrap", {"deny": R.NETWORK_NAMESPACE_UNAVAILABLE, "allow": None}),
    ("userns_disabled", "native", {"deny": R.USER_NAMESPACE_UNAVAILABLE,
                                   "allow": R.USER_NAMESPACE_UNAVAILABLE}),
    ("userns_disabled", "bwrap", {"deny": R.USER_NAMESPACE_UNAVAILABLE,
                                  "allow": R.USER_NAMESPACE_UNAVAILABLE}),
    ("proc_unmountable", "native", {"deny": R.PROC_MOUNT_FAILED, "allow": R.PROC_MOUNT_FAILED}),
    ("proc_unmountable", "bwrap", {"deny": R.PROC_MOUNT_FAILED, "allow": R.PROC_MOUNT_FAILED}),
    ("native_missing", "native", {"deny": R.NATIVE_MODULE_MISSING, "allow": R.NATIVE_MODULE_MISSING}),
    ("native_missing", "auto", {"deny": R.NATIVE_MODULE_MISSING, "allow": R.NATIVE_MODULE_MISSING}),
    ("native_missing", "bwrap", {"deny": R.BWRAP_INIT_UNAVAILABLE, "allow": R.BWRAP_INIT_UNAVAILABLE}),
    ("bwrap_missing", "bwrap", {"deny": R.BWRAP_NOT_FOUND, "allow": R.BWRAP_NOT_FOUND}),
    ("bwrap_old", "bwrap", {"deny": R.BWRAP_OPTION_UNSUPPORTED, "allow": R.BWRAP_OPTION_UNSUPPORTED}),
]


@pytest.mark.parametrize("host,backend,modes", STATUS_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_cli_status_per_network_mode(host, backend, modes, tmp_path):
    _need_backends(backend)
    for network, reason in modes.items():
        done = constrained.run_cli(host, ["status", "--backend", backend, "--network", network, "--json"],
                                   scratch=tmp_path)
        assert "Traceback" not in done.stderr, done.stderr
        report = json.loads(done.stdout)
        assert done.returncode == (0 if reason is None else 1), (network, done.returncode)
        if reason is None:
            assert report["available"] is True, (network, report)
        else:
            assert report["available"] is False, (network, report)
            assert reason.value in reasons_in(report), (network, report)


# ---------------------------------------------------------------- nested sandboxes

def _nested_result(outer_argv, env, scratch):
    done = subprocess.run(outer_argv, env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(scratch))
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, (done.returncode, done.stdout, done.stderr)
    out = json.loads(lines[-1])
    assert "unexpected" not in out, out["unexpected"]
    assert "status_exception" not in out, out["status_exception"]
    return out


def _check_consistent(out, marker):
    """Nested, the outcome depends on the outer sandbox; what must hold is that status
    predicts the launch, and a refused launch names a reason and never ran."""
    launch, status = out["launch"], out["status"]
    if status["available"]:
        assert launch["error"] is None and launch["returncode"] == 0 and launch["ran"], out
    else:
        assert launch["reason"] is not None and not launch["ran"], out
        assert launch["reason"] in reasons_in(status), out
    return launch["reason"]


def _inner_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = constrained.ROOT
    return env


@pytest.mark.parametrize("inner", ["native", "bwrap"])
@pytest.mark.parametrize("nested_userns", [False, True], ids=["userns-off", "userns-allowed"])
def test_nested_in_pysandbox(backend, inner, nested_userns, tmp_path):
    import pysandbox
    _need_backends(inner)
    marker = os.path.join(str(tmp_path), "marker-nested")
    outer = pysandbox.Policy.default(workdir=str(tmp_path), allow_nested_userns=nested_userns)
    argv = [sys.executable, SNIPPET, inner, "deny", str(tmp_path), marker]
    if nested_userns:
        argv.append("allow-nested")
    with leaks.unchanged():
        done = pysandbox.run(argv, policy=outer, backend=backend, capture_output=True, text=True,
                             env=_inner_env(), timeout=120)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, (done.returncode, done.stdout, done.stderr)
    out = json.loads(lines[-1])
    assert "unexpected" not in out, out["unexpected"]
    reason = _check_consistent(out, marker)
    if not nested_userns:
        # The outer sandbox disabled user namespaces: the inner one cannot exist.
        assert reason == R.USER_NAMESPACE_UNAVAILABLE.value, out


@pytest.mark.parametrize("inner", ["native", "bwrap"])
def test_nested_in_bwrap(inner, tmp_path):
    _need_backends(inner)
    marker = os.path.join(str(tmp_path), "marker-nested-bwrap")
    outer = [constrained.REAL_BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent",
             "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--bind", str(tmp_path), str(tmp_path), "--chdir", str(tmp_path), "--",
             sys.executable, SNIPPET, inner, "deny", str(tmp_path), marker, "allow-nested"]
    with leaks.unchanged():
        out = _nested_result(outer, _inner_env(), tmp_path)
    _check_consistent(out, marker)
    # Same question to bwrap itself, in the same kind of outer sandbox: where bwrap can
    # nest a sandbox with a fresh /proc, pysandbox must too.
    raw = subprocess.run(outer[:outer.index("--") + 1] + [
        constrained.REAL_BWRAP, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/",
        "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, text=True, timeout=60)
    if raw.returncode == 0:
        assert out["launch"]["ran"], out
    else:
        assert out["launch"]["reason"] in (R.PROC_MOUNT_FAILED.value, R.USER_NAMESPACE_UNAVAILABLE.value), \
            (out, raw.stderr)


# ---------------------------------------------------------------- pybwrap

PYBWRAP_CASES = [
    ("plain", [], None),
    ("userns_disabled", [], "user"),
    ("proc_unmountable", ["--proc", "/proc"], "proc"),
    ("netns_refused", ["--unshare-net"], "net"),
    ("netns_refused", [], None),                 # the live twin: no network namespace asked
    ("native_missing", [], "native"),
]


@pytest.mark.parametrize("host,extra,missing", PYBWRAP_CASES,
                         ids=[f"{h}-{m or 'runs'}{'-' + x[0] if x else ''}" for h, x, m in PYBWRAP_CASES])
def test_pybwrap_fails_like_bwrap(host, extra, missing, tmp_path):
    """pybwrap (native backend) on a constrained host: bwrap's own convention, exit 1
    and one ``bwrap: `` line; the command never runs."""
    _need_backends("native")
    work = workdir(tmp_path)
    marker = os.path.join(work, "marker-pybwrap")
    argv = ["--unshare-user", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
            *extra, "--bind", work, work, "--", "/bin/sh", "-c", 'echo ran > "$1"', "sh", marker]
    done = constrained.run(host, ["-m", "bwrap_compat", *argv], scratch=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    if missing is None:
        assert done.returncode == 0 and os.path.exists(marker), done.stderr
    else:
        assert done.returncode == 1, (done.returncode, done.stderr)
        assert done.stderr.startswith("bwrap: "), done.stderr
        assert not os.path.exists(marker), "the command ran on a host that cannot sandbox it"
