"""Run the probe under each backend for one policy and compare what it saw.

The host side of a run (the :class:`~tests.support.world.World` tree and its
descriptors) is in tests/support/world.py, the probe in tests/support/probe.py and
the normalisation rules in tests/support/probe_normalise.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pysandbox
from pysandbox import policy as P

from tests.support import hostcheck
from tests.support.probe_normalise import diff, flatten  # noqa: F401 (re-exported for tests)
from tests.support.world import (DATA_FD, DIR_FD, FD_DATA, PASS_FD, TREE, World,  # noqa: F401 (re-exported)
                                 caller_namespaces, host_devs)

PROBE_SOURCE = open(os.path.join(os.path.dirname(__file__), "..", "support", "probe.py")).read()
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C", "PSB_A": "alpha", "PSB_B": "beta",
            "PYTHONDONTWRITEBYTECODE": "1"}
TIMEOUT = 60


def probe_args(policy: P.Policy) -> dict:
    """Where the probe finds procfs and /dev, and which paths it describes."""
    proc = "/proc"
    dev = "/dev"
    paths = []
    for op in policy.fs:
        dest = P.fs_dest(op)
        if isinstance(op, P.Proc):
            proc = dest
        elif isinstance(op, P.Dev):
            dev = dest
        if dest not in paths:
            paths.append(dest)
    if policy.chdir and policy.chdir not in paths:
        paths.append(policy.chdir)
    # procfs is described, not listed: its entries are pids and per-process files
    paths = [p for p in paths if not _under_proc(p, policy)]
    return {"proc": proc, "dev": None if _under_proc(dev, policy) else dev,
            "tmp": None if _under_proc("/tmp", policy) else "/tmp",
            "paths": paths, "caller_ns": caller_namespaces()}


def _under_proc(path, policy) -> bool:
    return any(isinstance(op, P.Proc) and (path == op.dest or path.startswith(op.dest + "/"))
               for op in policy.fs)


# Launches that bwrap ended before our init reported, for no reason the backend could
# name (the one CI showed was the init's exec through a procfs below 0700 directories
# bwrap made, now bwrap_init_unavailable); each is retried once and listed here.
BWRAP_TRANSIENTS: list = []


# True: every probe runs as a command of a session (pysandbox/session.py) of the
# policy, so the comparison is of a session's view on both backends.
VIA_SESSION = False


@contextlib.contextmanager
def via_session():
    global VIA_SESSION
    VIA_SESSION = True
    try:
        yield
    finally:
        VIA_SESSION = False


def _run_once(argv, policy, backend):
    if not VIA_SESSION:
        return pysandbox.run(argv, policy=policy, backend=backend, env=BASE_ENV, capture_output=True,
                             timeout=TIMEOUT)
    with pysandbox.Sandbox(policy, backend=backend) as sb:
        return sb.run(argv, env=BASE_ENV, capture_output=True, timeout=TIMEOUT)


def _run_probe(policy: P.Policy, backend: str, world: World, fds: list):
    """pysandbox.run of the probe (or a session's run, under :func:`via_session`); a
    bwrap transient (above) is retried once, with the world's descriptors reopened when
    this launch owns them (a pipe is consumed)."""
    argv = [sys.executable, "-c", PROBE_SOURCE, json.dumps(probe_args(policy))]
    for attempt in (0, 1):
        try:
            return _run_once(argv, policy, backend)
        except pysandbox.SetupError as exc:
            transient = backend == "bwrap" and exc.stage == "bwrap" and "before its init reported" in str(exc)
            if attempt or not transient or (_reads_data_fd(policy) and not fds):
                raise
            BWRAP_TRANSIENTS.append(str(exc))
            if fds:
                world.close_fds(fds)
                fds[:] = world.open_fds()


def launch(policy: P.Policy, backend: str, world: World, *, fds_open: bool = False) -> dict:
    """Run the probe under ``backend``. Returns the probe's document, or a record
    of how the launch failed: ``{"error": class, "reason": code}`` or ``{"exit": rc}``.
    ``fds_open``: the caller has opened the world's descriptors (and closes them)."""
    fds = [] if fds_open else world.open_fds()
    try:
        done = _run_probe(policy, backend, world, fds)
    except pysandbox.SandboxError as exc:
        # "detail" is the message, shown in reports, never compared (flatten drops it)
        return {"error": type(exc).__name__, "reason": exc.reason.value, "detail": str(exc)[-500:]}
    except OSError as exc:
        return {"error": type(exc).__name__, "errno": exc.errno}
    finally:
        world.close_fds(fds)
    if done.returncode != 0:
        return {"exit": done.returncode, "stderr": done.stderr.decode(errors="replace")[-2000:]}
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {"exit": 0, "stdout": done.stdout.decode(errors="replace")[-2000:]}


@dataclass
class Verdict:
    name: str
    policy: P.Policy
    verdict: str          # same | mismatch | host-changed | both-failed | reference-unsupported
    diffs: list = field(default_factory=list)       # (field, first backend's value, second's)
    host_changes: list = field(default_factory=list)
    failure: dict | None = None        # the failure record when both failed / the reference refused
    seconds: float = 0.0
    backends: tuple = ("native", "bwrap")
    noise: list = field(default_factory=list)       # /tmp changes attributed to others (see below)

    @property
    def ok(self) -> bool:
        return self.verdict in ("same", "both-failed", "reference-unsupported")


def compare_backends(name: str, policy: P.Policy, world: World, backends=("native", "bwrap"),
                     retries: int = 5) -> Verdict:
    """Launch the probe under each backend; compare normalised documents; check the host.

    The temporary directory is shared with every other process on the host. A change
    there that names nothing of the policy's and is owned by another user, or that
    does not come back when the pair is launched again, is someone else's: it is
    recorded as ``noise``, not failed. A leak by a backend is owned by the caller
    (the sandbox's ids map to the caller's) and comes back on every launch."""
    noise = []
    for attempt in range(retries + 1):
        verdict = _compare_once(name, policy, world, backends)
        verdict.noise = noise
        if verdict.verdict == "host-changed" and _foreign_only(verdict, policy):
            noise.extend(verdict.host_changes)
            verdict.host_changes = []
            verdict.verdict = verdict.pre_host_verdict
            return verdict
        if verdict.verdict != "host-changed" or not _is_tmp_noise(verdict, policy):
            return verdict
        if _busy_without_us(verdict, world):
            # the same kind of change happens with no launch of ours: other processes
            noise.extend(verdict.host_changes + ["(changes of the same kind seen with no launch)"])
            verdict.host_changes = []
            verdict.verdict = verdict.pre_host_verdict
            return verdict
        if attempt == retries:
            return verdict
        noise.extend(verdict.host_changes)
        time.sleep(0.2 * (attempt + 1))   # let another process's burst of temp files pass
    return verdict


def _is_tmp_noise(verdict, policy) -> bool:
    """Changes that name nothing of the policy's: in the shared temporary directory,
    or mounts on host paths the policy has nothing to do with (another process
    mounting, e.g. tracefs for perf)."""
    gone, new, dirs = verdict.delta
    tmp = {tempfile.gettempdir(), "/tmp"}   # the shared one, not world.private_tmp
    names = set()
    paths = set()
    for op in policy.fs:
        for path in (P.fs_dest(op), getattr(op, "src", None) or ""):
            names.update(part for part in path.split("/") if part)
            if path and path != "/":
                paths.add(path)
    for mount in gone + new:
        point = mount[0]
        if point == "/" or any(point == p or point.startswith(p + "/") or p.startswith(point + "/")
                               for p in paths):
            return False
    for path, (added, removed) in dirs.items():
        if path not in tmp:
            return False
        if any(entry[0] in names for entry in added + removed):
            return False
    return True


def _busy_without_us(verdict, world) -> bool:
    """A control window as long as the launch, with no launch: does the shared
    temporary directory change anyway? (Never on a quiet host such as CI's, where the
    check stays strict.)"""
    before = hostcheck.snapshot(None, paths=[world.base])
    time.sleep(min(max(verdict.seconds, 0.3), 3.0))
    gone, new, dirs = before.delta(hostcheck.again(before))
    return bool(dirs) and not gone and not new and set(dirs) <= {tempfile.gettempdir(), "/tmp"}


def _foreign_only(verdict, policy) -> bool:
    """Every /tmp change is an entry owned by another user: not a backend's doing."""
    if not _is_tmp_noise(verdict, policy):
        return False
    me = os.geteuid()
    gone, new, dirs = verdict.delta
    return not gone and not new and all(
        entry[-1] != me for added, removed in dirs.values() for entry in added + removed)


def _reads_data_fd(policy) -> bool:
    return any(isinstance(op, P.File) and op.fd is not None for op in policy.fs)


def _launch_all(policy, backends, world) -> list[dict]:
    """Both launches at once (two cores, half the wall time), unless the policy reads
    a pipe: then one after the other, each with the pipe refilled."""
    if _reads_data_fd(policy):
        return [launch(policy, b, world) for b in backends]
    fds = world.open_fds()
    try:
        with ThreadPoolExecutor(max_workers=len(backends)) as pool:
            return list(pool.map(lambda b: launch(policy, b, world, fds_open=True), backends))
    finally:
        world.close_fds(fds)


def _compare_once(name, policy, world, backends) -> Verdict:
    start = time.monotonic()
    before = hostcheck.snapshot(policy, paths=[world.base, world.private_tmp])
    devs = host_devs()
    saved = tempfile.tempdir
    tempfile.tempdir = world.private_tmp   # a backend's own temporary files land here, watched
    try:
        docs = _launch_all(policy, backends, world)
    finally:
        tempfile.tempdir = saved
    after = hostcheck.again(before)
    delta = before.delta(after)
    changes = before.changes(after)
    flats = [flatten(d, devs) for d in docs]
    diffs = []
    for other in flats[1:]:
        diffs += diff(flats[0], other)
    failed = ["pid" not in d for d in docs]
    refused = [d.get("reason") in ("bwrap_option_unsupported", "bwrap_init_unavailable") for d in docs]
    failure = None
    verdict = None
    if any(refused) and not all(failed) and not any(f and not r for f, r in zip(failed, refused)):
        # the reference (bwrap) cannot express this policy here; the other side ran
        verdict, diffs, failure = "reference-unsupported", [], next(d for d in docs if "pid" not in d)
    elif any(failed) and not all(failed):
        # one side ran, the other did not: the launch outcome is the difference
        verdict = "mismatch"
        diffs = [("launch", *[d if f else "ran" for d, f in zip(docs, failed)])]
    elif diffs:
        verdict = "mismatch"
    elif all(failed):
        verdict, failure = "both-failed", docs[0]
    else:
        verdict = "same"
    pre_host_verdict = verdict
    if changes:
        verdict = "host-changed"
    out = Verdict(name, policy, verdict, diffs, changes, failure, time.monotonic() - start, tuple(backends))
    out.delta = delta
    out.pre_host_verdict = pre_host_verdict
    return out


def describe_policy(policy: P.Policy) -> str:
    """A compact, one-op-a-line rendering for reports."""
    lines = []
    for op in policy.fs:
        fields = {k: v for k, v in vars(op).items() if v not in (None, False, ())}
        kind = type(op).__name__
        lines.append(f"  {kind} " + " ".join(f"{k}={oct(v) if k == 'mode' else _short(v)}"
                                             for k, v in fields.items()))
    default = P.Policy()
    for name in ("namespaces", "network", "env", "chdir", "uid", "gid", "hostname", "die_with_parent",
                 "new_session", "as_pid_1", "caps_keep", "pass_fds", "allow_nested_userns", "seccomp",
                 "argv0"):
        value = getattr(policy, name)
        if value != getattr(default, name):
            lines.append(f"  {name}={_short(value)}")
    return "\n".join(lines)


def _short(value) -> str:
    if isinstance(value, frozenset):
        return "{" + ",".join(sorted(value)) + "}"
    if isinstance(value, P.Network):
        return value.mode
    if isinstance(value, tuple) and value and isinstance(value[0], bytes):
        return f"<{len(value)} program(s)>"
    return repr(value)


def format_verdict(v: Verdict, verbose: bool = False) -> str:
    head = f"[{v.verdict.upper():12}] {v.name} ({v.seconds:.2f}s)"
    parts = [head]
    if verbose or not v.ok:
        parts.append(describe_policy(v.policy))
    if v.failure is not None:
        parts.append(f"  failed: {v.failure}")
    left, right = (f"{b}:".ljust(8) for b in v.backends[:2])
    for fieldname, a, b in v.diffs[:60]:
        parts.append(f"    {fieldname}\n      {left}{_clip(a)}\n      {right}{_clip(b)}")
    if len(v.diffs) > 60:
        parts.append(f"    ... {len(v.diffs) - 60} more differing fields")
    for change in v.host_changes:
        parts.append(f"    HOST: {change}")
    for change in v.noise:
        parts.append(f"    (tmp noise from other processes, not repeated on relaunch: {change})")
    return "\n".join(parts)


def _clip(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) < 300 else text[:300] + "..."
