"""A failure injected into each step of the setup tail (native/psb_tail.h) reads the same on
every path that runs the step: the native child, the bwrap backend's C init and a
session's server. Same reason, same stage,
same errno, same plan step, same message; and the command never ran. Each injection has a
live control: the same launch without the injected value runs the command.

Injection, never a hook in the product: a value the kernel refuses, put where the
launcher (trusted, outside the sandbox) builds the launch: a policy value (an rlimit above
fs.nr_open), the launcher's own plan and decisions patched in this test process (a
seccomp program the kernel's checker refuses, a Landlock kind it does not know, a proxy
port out of range, a kept capability numbered past the kernel's last), or the launcher's
end of the terminal socket closed before the launch (the master cannot be handed over).
Nothing a sandboxed command can reach selects a failure.

Where a path does not run a step it says so at the step: sessions refuse network proxy
mode before any launch, and take no terminal. A session sets each command's rlimits in
the command's process (native/psb_session_limits.h), so the RLIMIT step runs there too.
"""

from __future__ import annotations

import errno
import os
import struct

import pytest

import pysandbox
from pysandbox import plan as P
from pysandbox import sandbox_start
from pysandbox.backends import get_backend, landlock, tail
from pysandbox.backends.bwrap import bwrap_tail
from pysandbox.cli_errors import without_step
from pysandbox.errors import Reason, SetupError
from pysandbox.limits import Limits
from pysandbox.records import replace

pytestmark = pytest.mark.requires("userns")

# One BPF load and no return: the kernel's checker refuses it (EINVAL).
BAD_FILTER = struct.pack("<HBBI", 0x20, 0, 0, 0)
MARK = "touch ran"


def _policy(tmp_path, **kw):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return pysandbox.Policy.default(workdir=work, **kw)


def _fresh_plans(monkeypatch, change=None):
    """Plans compiled anew for this test, each passed through ``change`` (the launcher's
    own plan: the sandbox never sees it)."""
    monkeypatch.setattr(sandbox_start, "_plan_cache", {})
    monkeypatch.setattr(sandbox_start, "_plan_by_id", {})
    native = get_backend("native")
    monkeypatch.setattr(native, "_ready", {})   # its op arrays, translated per plan
    monkeypatch.setattr(bwrap_tail, "_cache", {})   # the bwrap init's, likewise
    if change is not None:
        real = P.compile
        monkeypatch.setattr(P, "compile", lambda policy, **kw: change(real(policy, **kw)))


def _bad_seccomp(plan):
    ops = list(plan.ops)
    i = next(i for i, op in enumerate(ops) if isinstance(op, P.Seccomp))
    ops[i] = replace(ops[i], program=BAD_FILTER)
    return replace(plan, ops=tuple(ops))


def _bad_port(plan):
    ops = tuple(replace(op, port=70000) if isinstance(op, P.ProxyListener) else op for op in plan.ops)
    return replace(plan, ops=ops)


def _launch(policy, backend, tmp_path):
    """The failure of a one-shot launch of ``touch ran`` (None: it ran)."""
    try:
        pysandbox.run(["sh", "-c", MARK], policy=policy, backend=backend, timeout=60, cwd=tmp_path / "work")
    except SetupError as exc:
        return exc
    return None


def _session(policy, backend, tmp_path):
    """The failure of ``touch ran`` in a session (None: it ran), at the session's start
    or at the command's."""
    try:
        with pysandbox.Sandbox(policy=policy, backend=backend) as sb:
            sb.run(["sh", "-c", MARK], timeout=60, cwd=str(tmp_path / "work"))
    except SetupError as exc:
        return exc
    return None


def _reading(exc):
    """What must be the same on every path."""
    assert isinstance(exc, SetupError), exc
    return exc.reason, exc.stage, exc.errno, without_step(str(exc))


def _check_same(failures, tmp_path, step, err):
    readings = {path: _reading(exc) for path, exc in failures.items()}
    first = next(iter(readings.values()))
    assert first[0] is Reason.SETUP_FAILED and first[1] == tail.STAGE[step] and first[2] == err, readings
    assert all(r == first for r in readings.values()), readings
    for path, exc in failures.items():
        assert f"tail step {step}" in str(exc), (path, str(exc))
        assert "None" not in str(exc), (path, str(exc))
    assert not (tmp_path / "work" / "ran").exists()


def _control(policy, tmp_path, paths):
    for path in paths:
        (tmp_path / "work" / "ran").unlink(missing_ok=True)
        assert path(policy) is None, path
        assert (tmp_path / "work" / "ran").exists(), path


@pytest.mark.requires("bwrap")
def test_an_rlimit_the_kernel_refuses(tmp_path, monkeypatch):
    _fresh_plans(monkeypatch)
    bad = _policy(tmp_path, limits=Limits(open_files=1 << 30))   # above fs.nr_open: EPERM, root too
    failures = {b: _launch(bad, b, tmp_path) for b in ("native", "bwrap")}
    monkeypatch.undo()
    _fresh_plans(monkeypatch)
    for b in ("native", "bwrap"):   # a session's command: its rlimits, set by the server's child
        failures[f"session-{b}"] = _session(bad, b, tmp_path)
    _check_same(failures, tmp_path, "RLIMIT", errno.EPERM)
    assert all(exc.filename == "RLIMIT_NOFILE" for exc in failures.values())
    _control(_policy(tmp_path, limits=Limits(open_files=64)), tmp_path,
             [lambda p: _launch(p, "native", tmp_path), lambda p: _launch(p, "bwrap", tmp_path),
              lambda p: _session(p, "native", tmp_path), lambda p: _session(p, "bwrap", tmp_path)])


@pytest.mark.requires("bwrap")
def test_a_seccomp_program_the_kernel_refuses(tmp_path, monkeypatch):
    _fresh_plans(monkeypatch, _bad_seccomp)
    bad = _policy(tmp_path)
    failures = {}
    for b in ("native", "bwrap"):
        failures[b] = _launch(bad, b, tmp_path)
        failures[f"session-{b}"] = _session(bad, b, tmp_path)
    steps = {exc.op for exc in failures.values()}
    assert len(steps) == 1 and None not in steps, failures
    _check_same(failures, tmp_path, "SECCOMP", errno.EINVAL)
    monkeypatch.undo()
    _fresh_plans(monkeypatch)
    good = _policy(tmp_path)
    _control(good, tmp_path, [lambda p: _launch(p, "native", tmp_path), lambda p: _launch(p, "bwrap", tmp_path),
                              lambda p: _session(p, "native", tmp_path), lambda p: _session(p, "bwrap", tmp_path)])


@pytest.mark.requires("bwrap")
def test_a_landlock_domain_the_kernel_refuses(tmp_path, monkeypatch):
    if landlock.abi() < 1:
        pytest.skip("not applicable here: no Landlock on this kernel (no domain is asked for)")
    _fresh_plans(monkeypatch)
    monkeypatch.setattr(landlock, "kind", lambda *a, **kw: 9)   # a kind psb_landlock_self does not know
    bad = _policy(tmp_path)
    failures = {}
    for b in ("native", "bwrap"):
        failures[b] = _launch(bad, b, tmp_path)
        failures[f"session-{b}"] = _session(bad, b, tmp_path)
    one_shot = {failures["native"].op, failures["bwrap"].op}
    assert len(one_shot) == 1 and None not in one_shot, failures
    _check_same(failures, tmp_path, "LANDLOCK", errno.EINVAL)
    monkeypatch.undo()
    _fresh_plans(monkeypatch)
    _control(_policy(tmp_path), tmp_path,
             [lambda p: _launch(p, "native", tmp_path), lambda p: _launch(p, "bwrap", tmp_path),
              lambda p: _session(p, "native", tmp_path), lambda p: _session(p, "bwrap", tmp_path)])


@pytest.mark.requires("bwrap")
def test_a_proxy_listener_the_kernel_refuses(tmp_path, monkeypatch):
    _fresh_plans(monkeypatch, _bad_port)
    bad = _policy(tmp_path, network="proxy")
    failures = {b: _launch(bad, b, tmp_path) for b in ("native", "bwrap")}
    # (a session's listener is this same launch step, as_pid_1 with the server as command)
    steps = {exc.op for exc in failures.values()}
    assert len(steps) == 1 and None not in steps, failures
    _check_same(failures, tmp_path, "LISTEN", errno.EINVAL)
    monkeypatch.undo()
    _fresh_plans(monkeypatch)
    _control(_policy(tmp_path, network="proxy"), tmp_path,
             [lambda p: _launch(p, "native", tmp_path), lambda p: _launch(p, "bwrap", tmp_path)])


def _caps_at_62(monkeypatch):
    """The launcher's capability numbering with ``chown`` at bit 62, a capability no kernel
    has: the kept set the tail asks for is one the kernel refuses (EPERM), while bwrap's own
    --cap-add still names CAP_CHOWN. Both backends' tail comes from native_translate."""
    from pysandbox.backends.native import native_translate
    names = list(native_translate.CAPABILITIES)
    names += [f"unknown{i}" for i in range(len(names), 63)]
    at = names.index("chown")
    names[at], names[62] = names[62], names[at]
    monkeypatch.setattr(native_translate, "CAPABILITIES", tuple(names))


@pytest.mark.requires("bwrap")
def test_a_capability_set_the_kernel_refuses(tmp_path, monkeypatch):
    _fresh_plans(monkeypatch)
    _caps_at_62(monkeypatch)
    bad = _policy(tmp_path, caps_keep=("chown",))
    failures = {}
    for b in ("native", "bwrap"):
        failures[b] = _launch(bad, b, tmp_path)
        failures[f"session-{b}"] = _session(bad, b, tmp_path)
    steps = {exc.op for exc in failures.values()}
    assert len(steps) == 1 and None not in steps, failures
    _check_same(failures, tmp_path, "CAPS", errno.EPERM)
    monkeypatch.undo()
    _fresh_plans(monkeypatch)
    _control(_policy(tmp_path, caps_keep=("chown",)), tmp_path,
             [lambda p: _launch(p, "native", tmp_path), lambda p: _launch(p, "bwrap", tmp_path),
              lambda p: _session(p, "native", tmp_path), lambda p: _session(p, "bwrap", tmp_path)])


def _with_pty(policy, backend, tmp_path, peer_open):
    """A launch with a terminal whose launcher end is open or already closed (then the
    master cannot be handed over: EPIPE)."""
    import socket
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if not peer_open:
        a.close()
    try:
        proc = pysandbox.Popen(["sh", "-c", MARK], policy=policy, backend=backend, pty_socket=b.fileno(),
                               cwd=tmp_path / "work")
    except SetupError as exc:
        return exc
    finally:
        b.close()
    from pysandbox.terminal import receive_master
    try:
        master = receive_master(a)
        try:
            assert proc.wait(60) == 0
        finally:
            os.close(master)
    finally:
        a.close()
    return None


@pytest.mark.requires("bwrap")
def test_a_terminal_that_cannot_be_handed_over(tmp_path, monkeypatch):
    _fresh_plans(monkeypatch)
    policy = _policy(tmp_path)
    failures = {b: _with_pty(policy, b, tmp_path, False) for b in ("native", "bwrap")}
    readings = {path: _reading(exc) for path, exc in failures.items()}
    assert set(readings.values()) == {(Reason.TERMINAL_UNAVAILABLE, "terminal", errno.EPIPE,
                                       readings["native"][3])}, readings
    assert not (tmp_path / "work" / "ran").exists()
    monkeypatch.undo()
    _control(policy, tmp_path, [lambda p: _with_pty(p, "native", tmp_path, True),
                                lambda p: _with_pty(p, "bwrap", tmp_path, True)])
