"""Helpers shared by the test directories.

This package holds, in this module, the capability checks and small process helpers;
in submodules: ``constrained`` (simulated constrained hosts), ``nsholder`` (a process
holding namespaces for the join tests), ``world`` (the host tree and descriptors a
sandbox run binds from), ``probe`` (the in-sandbox probe script), ``probe_normalise``
(what of two probe reports is compared), ``hostcheck`` (is the host left as it was)
``policy_corpus`` (hand-written policies covering the whole Policy grammar),
``cgroups`` (cgroup names for the leftover-sweep tests), ``proxylab`` (upstream
test servers in a network namespace, a test CA and a resolver hook for the proxy tests) and ``upstream`` (those servers' program).

``need(cap)`` skips with the reason the host lacks ``cap``; under
``PYSANDBOX_MUST_WORK=1`` (CI) that skip is a failure. ``not_applicable(why)``
is a skip that stays a skip (a negative twin on a host that has the capability).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time

import pytest

MUST_WORK = os.environ.get("PYSANDBOX_MUST_WORK") == "1"
NEEDS_PREFIX = "needs "


def settled_fds() -> set[str]:
    """This process's descriptor numbers, once the native backend's closer thread has
    closed what reaped sandboxes handed it (their mount namespaces' references,
    native/psb_nsref.c: closed just after the reap, not in it)."""
    try:
        from pysandbox.backends.native import drain_closes
        drain_closes()
    except Exception:   # noqa: BLE001 - no native module here: nothing is queued
        pass
    return set(os.listdir("/proc/self/fd"))


def need(cap: str, why: str) -> None:
    """Skip (or, under PYSANDBOX_MUST_WORK=1, fail) because the host lacks ``cap``."""
    msg = f"{NEEDS_PREFIX}{cap}: {why}"
    if MUST_WORK:
        pytest.fail(f"PYSANDBOX_MUST_WORK=1 and {msg}", pytrace=False)
    pytest.skip(msg)


def not_applicable(why: str) -> None:
    pytest.skip(f"not applicable here: {why}")


@functools.lru_cache(maxsize=None)
def host_capability(cap: str) -> str | None:
    """None when the host has ``cap``, else why not. Probes run in throwaway children."""
    if cap == "root":
        return None if os.geteuid() == 0 else "runs as an unprivileged user"
    if cap == "nonroot":
        return None if os.geteuid() != 0 else "runs as root"
    if cap == "bwrap":
        from pysandbox import status
        st = status(backend="bwrap")
        return None if st.available else f"bwrap backend unavailable: {st.reason} {st.detail}".strip()
    if cap == "native":
        from pysandbox import status
        st = status(backend="native")
        return None if st.available else f"native backend unavailable: {st.reason} {st.detail}".strip()
    if cap in ("userns", "netns"):
        flags = ["-U"] if cap == "userns" else ["-U", "-r", "-n"]
        tool = shutil.which("unshare")
        if tool is None:
            return "util-linux unshare(1) missing"
        done = subprocess.run([tool, *flags, "true"], capture_output=True, text=True)
        return None if done.returncode == 0 else f"unshare {' '.join(flags)} failed: {done.stderr.strip()}"
    if cap in ("landlock", "landlock_signal_scope"):
        # the kernel's own answer (the probe the backends use), without its override
        from pysandbox.backends import landlock
        abi = landlock.kernel_abi()
        if cap == "landlock":
            return None if abi >= 1 else "the kernel has no Landlock (or it is disabled)"
        return None if abi >= landlock.SIGNAL_ABI else \
            f"Landlock ABI {abi}: no signal scope (ABI {landlock.SIGNAL_ABI}, Linux 6.12)"
    if cap == "ipv6":
        return None if os.path.exists("/proc/net/if_inet6") else "no IPv6 on this host"
    if cap == "pyroute2":
        try:
            import pyroute2  # noqa: F401
        except ImportError:
            return "pyroute2 not installed (pip install -e '.[test]')"
        return None
    raise ValueError(f"unknown capability {cap!r}")


def python_in_sandbox() -> str:
    """The interpreter to run inside a sandbox: the running one (it is under / , bound read-only)."""
    return sys.executable


def wait_until(pred, seconds: float = 20.0) -> bool:
    """Poll ``pred`` every 50 ms until it holds or ``seconds`` pass (bounded); its last value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def bounded(fn, seconds: float):
    """``fn()`` in a thread: (its exception or None, the seconds it took) if it returns
    within ``seconds``; a call still blocked fails the test there instead of hanging the
    suite (the caller's ``with`` then ends what blocks it)."""
    import threading
    out: list = []

    def call():
        try:
            fn()
            out.append(None)
        except BaseException as exc:   # noqa: BLE001 - handed to the test
            out.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(seconds)
    assert out, f"still blocked after {seconds} s"
    return out[0], time.monotonic() - t0


def write_id_maps(pid: int, uid: int, gid: int) -> None:
    """Map ``uid``/``gid`` inside the user namespace of ``pid`` to ours (setgroups denied),
    as a caller of --userns-block-fd does from outside."""
    with open(f"/proc/{pid}/setgroups", "w") as f:
        f.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"{uid} {os.geteuid()} 1\n")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"{gid} {os.getegid()} 1\n")


def processes_with(needle: str) -> list[tuple[int, bytes]]:
    """(pid, raw command line) of the host processes, this one excepted, whose command
    line (NUL-separated) contains ``needle``."""
    found = []
    me = os.getpid()
    want = needle.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if want in cmd:
            found.append((int(name), cmd))
    return found
