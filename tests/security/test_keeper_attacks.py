"""A session command attacks its keeper (its parent, the process that holds its
lifetime) while a timeout runs, through every front-end that runs session commands:
``Sandbox``, ``Pool``, asyncio and the Deep Agents backend (THREAT_MODEL.md, "sessions:
one command's processes"; docs/ARCHITECTURE.md, "Sessions").

1. Where the kernel has Landlock's signal scope, every session command's domain scopes
   signals: SIGSTOP, SIGTSTP, SIGCONT and SIGKILL to the keeper and the server (pid 1)
   are refused, while the command's own child takes them (the live control); without
   the domain (PYSANDBOX_NO_LANDLOCK=1) the same signals land (the second control).
2. Wherever they land (an older kernel, no Landlock; here PYSANDBOX_NO_LANDLOCK=1), or
   where a command keeps CAP_SYS_PTRACE and traces its keeper, ending a command does not
   depend on the keeper: the timeout still returns in bounded time, with the command's
   whole tree ended (a setsid'd, TERM-ignoring daemon included), and the next command
   meets none of it. Each attack's own report (the keeper's state, seen by the command
   right after it) is the live control that the attack landed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest

import pysandbox
from pysandbox import aio
from pysandbox.session import Sandbox
from tests.support import bounded, host_capability, need

pytestmark = pytest.mark.requires("userns")

LIST = 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f" 2>/dev/null; echo; done'
BOUND = 30.0   # seconds a timed-out run may take to return (timeout 2 s + grace 0.5 s + setup, busy machine)

SIGNALS = r'''
import json, os, signal, time
kid = os.fork()
if kid == 0:
    while True:
        time.sleep(1)
out = {}
for who, pid in (("keeper", os.getppid()), ("server", 1), ("child", kid)):
    for sig in ("SIGSTOP", "SIGTSTP", "SIGCONT", "SIGKILL"):
        if who != "child" and sig == "SIGKILL":
            sig = "SIGCONT"   # a landed SIGKILL on the keeper would end this probe
        try:
            os.kill(pid, getattr(signal, sig))
            out[f"{who}-{sig}"] = "ok"
        except OSError as e:
            out[f"{who}-{sig}"] = e.strerror
    if who != "child":
        os.kill(pid, signal.SIGCONT) if out[f"{who}-SIGSTOP"] == "ok" else None
os.waitpid(kid, 0)
print(json.dumps(out))
'''


def _signal_probe(sb):
    done = sb.run([sys.executable, "-I", "-c", SIGNALS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_signals_to_the_keeper_and_server_are_refused(backend, tmp_path):
    why = host_capability("landlock_signal_scope")
    if why is not None:
        need("landlock_signal_scope", why)
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        got = _signal_probe(sb)
    for sig in ("SIGSTOP", "SIGTSTP", "SIGCONT", "SIGKILL"):
        assert got[f"child-{sig}"] == "ok", got   # live control: its own child
    for who in ("keeper", "server"):
        for sig in ("SIGSTOP", "SIGTSTP", "SIGCONT"):
            assert got[f"{who}-{sig}"] == "Operation not permitted", (who, sig, got)


def test_control_without_landlock_the_signals_land(backend, tmp_path, monkeypatch):
    """The second control: the refusals above are the domain's, not an accident of
    uids or of pid 1 (the kernel drops pid 1's unhandled signals, it does not refuse)."""
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    with Sandbox(pysandbox.Policy.default(workdir=tmp_path), backend) as sb:
        got = _signal_probe(sb)
        alive = sb.run(["echo", "ok"], capture_output=True, text=True, timeout=60)
    assert all(v == "ok" for v in got.values()), got
    assert alive.stdout == "ok\n"


# The attacks. Each starts a setsid'd daemon that ignores SIGTERM and SIGHUP (a needle
# in its argv), then attacks the keeper ($PPID), writes the keeper's state to
# attack.txt (the live control that it landed), and sleeps past the timeout.
# (the stop takes effect when the keeper next runs: wait up to 2 s for it)
_STATE = ('i=0; while [ $i -lt 40 ] && ! grep -q "^State:.*stop" /proc/$k/status; do sleep 0.05; i=$((i+1)); done; '
          'grep "^State" /proc/$k/status > attack.txt')
ATTACKS = {
    "sigstop": f"kill -STOP $k; {_STATE}",
    "sigtstp-then-sigstop": f"kill -TSTP $k; kill -STOP $k; {_STATE}",
    "stop-cont-games": ("(i=0; while [ $i -lt 2000 ]; do kill -STOP $k; kill -CONT $k; i=$((i+1)); done; "
                        f"kill -STOP $k) & sleep 0.5; {_STATE}"),
    "ptrace": (f"{sys.executable} -I -c 'import ctypes, os, sys, time; "
               "libc = ctypes.CDLL(None, use_errno=True); "
               "r = libc.ptrace(16, int(sys.argv[1]), None, None); "   # PTRACE_ATTACH: a SIGSTOP and a trace stop
               "time.sleep(0.3); os.system(\"grep ^State /proc/%s/status > attack.txt\" % sys.argv[1]); "
               "time.sleep(60)' $k &"
               " sleep 0.5"),
}


def _attack(name: str, needle: str) -> str:
    daemon = f"setsid sh -c \"trap '' TERM HUP; sleep {needle}; : \" &"
    return f"k=$PPID; {daemon} sleep 0.2; {ATTACKS[name]}; sleep 30"


def _attack_policy(name, tmp_path, monkeypatch):
    """The attacks land only without the command's domain (PYSANDBOX_NO_LANDLOCK=1);
    ptrace also needs CAP_SYS_PTRACE (the keeper is undumpable)."""
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    kw = {"caps_keep": ("sys_ptrace",)} if name == "ptrace" else {}
    return pysandbox.Policy.default(workdir=tmp_path, **kw)


def _landed(tmp_path) -> str:
    state = (tmp_path / "attack.txt").read_text()
    assert "stopped" in state or "tracing stop" in state, state   # live control: it landed
    return state


def _bounded(fn):
    """``fn()``'s exception (or None) and its time, within BOUND seconds (tests/support
    ``bounded``: a regression fails instead of hanging the suite; leaving the ``with``
    then closes the session, which ends the blocked call)."""
    return bounded(fn, BOUND)


def _needle() -> str:
    return f"10{uuid.uuid4().int % 90 + 10}.25"   # a sleep length no other process has


def _leftovers(sb, needle) -> list[str]:
    done = sb.run(["sh", "-c", LIST], capture_output=True, text=True, timeout=60)
    assert "sh -c" in done.stdout, done   # the listing sees processes at all
    return [line for line in done.stdout.splitlines() if needle in line]


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_sandbox_timeout_ends_a_command_that_stopped_its_keeper(backend, tmp_path, monkeypatch, attack):
    needle = _needle()
    with Sandbox(_attack_policy(attack, tmp_path, monkeypatch), backend) as sb:
        exc, _ = _bounded(lambda: sb.run(["sh", "-c", _attack(attack, needle)], capture_output=True,
                                         timeout=2, kill_grace=0.5))
        _landed(tmp_path)
        assert isinstance(exc, subprocess.TimeoutExpired), exc
        assert _leftovers(sb, needle) == []
        assert sb.run(["echo", "ok"], capture_output=True, text=True, timeout=60).stdout == "ok\n"


def test_sandbox_kill_ends_a_command_that_stopped_its_keeper(backend, tmp_path, monkeypatch):
    needle = _needle()
    with Sandbox(_attack_policy("sigstop", tmp_path, monkeypatch), backend) as sb:
        proc = sb.Popen(["sh", "-c", _attack("sigstop", needle)])
        deadline = time.monotonic() + 30
        while not (tmp_path / "attack.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        _landed(tmp_path)
        proc.kill()
        exc, _ = _bounded(lambda: proc.wait())
        assert exc is None and proc.returncode == -9, (exc, proc.returncode)
        assert _leftovers(sb, needle) == []


def test_pool_timeout_ends_a_command_that_stopped_its_keeper(backend, tmp_path, monkeypatch):
    needle = _needle()
    policy = _attack_policy("sigstop", tmp_path, monkeypatch)
    with pysandbox.Pool(policy, size=1, backend=backend) as pool:
        exc, _ = _bounded(lambda: pool.run(["sh", "-c", _attack("sigstop", needle)], capture_output=True,
                                           timeout=2, kill_grace=0.5))
        _landed(tmp_path)
        assert isinstance(exc, subprocess.TimeoutExpired), exc
        assert pool.run(["echo", "ok"], capture_output=True, text=True, timeout=60).stdout == "ok\n"


def test_asyncio_timeout_and_cancel_end_a_command_that_stopped_its_keeper(backend, tmp_path, monkeypatch):
    policy = _attack_policy("sigstop", tmp_path, monkeypatch)
    n1, n2 = _needle(), _needle()

    async def main():
        async with aio.Sandbox(policy, backend) as sb:
            t0 = time.monotonic()
            with pytest.raises(subprocess.TimeoutExpired):
                await asyncio.wait_for(sb.run(["sh", "-c", _attack("sigstop", n1)], capture_output=True,
                                              timeout=2, kill_grace=0.5), BOUND)
            timed = time.monotonic() - t0
            _landed(tmp_path)
            (tmp_path / "attack.txt").unlink()
            task = asyncio.ensure_future(sb.run(["sh", "-c", _attack("sigstop", n2)], capture_output=True))
            while not (tmp_path / "attack.txt").exists() and time.monotonic() - t0 < 30:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)
            _landed(tmp_path)
            t1 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, BOUND)
            cancelled = time.monotonic() - t1
            listing = await sb.run(["sh", "-c", LIST], capture_output=True, timeout=60)
            return timed, cancelled, listing.stdout.decode()

    got: list = []
    exc, _ = _bounded(lambda: got.append(asyncio.run(main())))
    assert exc is None, exc
    timed, cancelled, listing = got[0]
    assert timed < BOUND and cancelled < BOUND, (timed, cancelled)
    assert "sh -c" in listing
    assert [line for line in listing.splitlines() if n1 in line or n2 in line] == []


def test_deepagents_execute_timeout_returns_124_when_the_keeper_is_stopped(backend, tmp_path, monkeypatch):
    pytest.importorskip("deepagents")
    from pysandbox.integrations.deepagents import TIMEOUT_EXIT_CODE, PysandboxSandbox
    needle = _needle()
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    box = PysandboxSandbox(backend=backend)
    res: list = []
    try:
        exc, took = _bounded(lambda: res.append(
            box.execute(_attack("sigstop", needle).replace("attack.txt", "/tmp/attack.txt"), timeout=2)))
        assert exc is None, exc
        state = box.execute("cat /tmp/attack.txt", timeout=60).output
        listing = box.execute(LIST, timeout=60).output
    finally:
        box.close()
    assert "stopped" in state, state   # live control: the attack landed
    assert res[0].exit_code == TIMEOUT_EXIT_CODE, (res, took)
    assert "sh -c" in listing and needle not in listing
