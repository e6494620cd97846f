"""The boundary between a session's server, its keepers and its commands, attacked from a
command, on both backends; each refusal next to a live control that the same move works
where it is allowed.

1. The server's channel and memory are out of reach: pid 1 and the command's keeper (its
   parent) refuse /proc fd/mem/environ/maps, pidfd_getfd and ptrace; the command's own
   (or its child's) accept them. A command holds exactly 0, 1, 2 and its pass_fds.
2. The server survives SIGKILL and SIGSTOP from a command; the session keeps working.
3. A command that kills its keeper (possible only without Landlock's signal scope): the
   run returns, the session works, and nothing the command started is alive in the next
   command. Stopping, tracing and signalling the keeper: tests/security/test_keeper_attacks.py.
4. setsid'd, TERM-ignoring leftovers die when the command ends, and with its timeout.
5. Two commands at once: kill() of one ends its tree, not the other's.
6. A bounded fork storm is gone after kill().
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid

import pytest

import pysandbox
from pysandbox.session import Sandbox

pytestmark = pytest.mark.requires("userns")

# Every process's command line, one a line (a process that is gone by the time it is
# read is skipped).
LIST = 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f" 2>/dev/null; echo; done'

PROBE = r'''
import ctypes, errno, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ptrace.restype = ctypes.c_long
R = {}
def attempt(name, fn):
    try:
        fn()
        R[name] = "ok"
    except OSError as e:
        R[name] = errno.errorcode.get(e.errno, str(e.errno))
def check(ret):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret
buf = ctypes.create_string_buffer(b"psb-mem-probe", 32)
def mem(pid):
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
        f.seek(ctypes.addressof(buf))
        if pid == "self":
            assert f.read(13) == b"psb-mem-probe"
        else:
            f.read(16)
def read(path):
    with open(path, "rb") as f:
        f.read(64)
def getfd(pid):
    pfd = os.pidfd_open(pid)
    try:
        os.close(check(libc.syscall(438, pfd, 0, 0)))   # pidfd_getfd(pidfd, 0, 0)
    finally:
        os.close(pfd)
def ptrace(pid):
    check(libc.ptrace(ctypes.c_long(16), ctypes.c_long(pid), None, None))   # PTRACE_ATTACH
    os.waitpid(pid, 0)
    libc.ptrace(ctypes.c_long(17), ctypes.c_long(pid), None, None)          # PTRACE_DETACH
kid = os.fork()
if kid == 0:
    time.sleep(60)
    os._exit(0)
R["ppid"] = os.getppid()
def fds(pid):
    # The numbers may be listed (the directory is its owner's, and a command may have
    # the server's uid); what matters is that no link of them can be followed or read.
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        names = [str(n) for n in range(16)]
    R[f"fdnames_{pid}"] = len(names)
    for n in names:
        try:
            os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError as e:
            if e.errno == errno.ENOENT:
                continue
            os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDONLY))   # must fail as well
            raise
        if pid != "self":
            raise AssertionError(f"/proc/{pid}/fd/{n} readable")
        os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDONLY))
        return
    if pid == "self":
        raise AssertionError("no fd of its own readable")
    raise OSError(errno.EACCES, "every link refused")
R["uid"] = os.getuid()
for name, pid in (("server", 1), ("keeper", os.getppid()), ("self", "self")):
    attempt(f"fd_{name}", lambda: fds(pid))
    attempt(f"mem_{name}", lambda: mem(pid))
    attempt(f"environ_{name}", lambda: read(f"/proc/{pid}/environ"))
    attempt(f"maps_{name}", lambda: read(f"/proc/{pid}/maps"))
for name, pid in (("server", 1), ("keeper", os.getppid()), ("child", kid)):
    attempt(f"getfd_{name}", lambda: getfd(pid))
    attempt(f"ptrace_{name}", lambda: ptrace(pid))
os.kill(kid, 9)
os.waitpid(kid, 0)
print(json.dumps(R))
'''

OPEN_FDS = r'''
import json, os
listed = [int(x) for x in os.listdir("/proc/self/fd")]
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
print(json.dumps(sorted(fd for fd in listed if is_open(fd))))   # the listing's own is closed by now
'''


def _policy(tmp_path):
    return pysandbox.Policy.default(workdir=tmp_path)


def _alive(sb, needle: str) -> list[str]:
    """The command lines of the session's processes that contain ``needle``, from a new
    command (which does not contain it itself: the needle is split in its argv)."""
    done = sb.run(["sh", "-c", LIST], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "sh -c" in done.stdout   # the listing sees processes at all: itself
    return [line for line in done.stdout.splitlines() if needle in line]


def test_server_and_keeper_are_out_of_reach(backend, tmp_path):
    with Sandbox(_policy(tmp_path), backend) as sb:
        done = sb.run([sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    assert res["ppid"] != 1, res   # the keeper, not the server, is the command's parent
    for what in ("fd", "mem", "environ", "maps"):
        assert res[f"{what}_self"] == "ok", (what, res)   # live control: the command's own
        for target in ("server", "keeper"):
            assert res[f"{what}_{target}"] in ("EACCES", "EPERM"), (what, target, res)
    for what in ("getfd", "ptrace"):
        assert res[f"{what}_child"] == "ok", (what, res)   # live control: its own child
        for target in ("server", "keeper"):
            assert res[f"{what}_{target}"] in ("EACCES", "EPERM"), (what, target, res)


def test_a_command_holds_only_its_descriptors(backend, tmp_path):
    r, w = os.pipe()
    try:
        with Sandbox(_policy(tmp_path), backend) as sb:
            plain = sb.run([sys.executable, "-I", "-c", OPEN_FDS], capture_output=True, text=True, timeout=60)
            passed = sb.run([sys.executable, "-I", "-c", OPEN_FDS], capture_output=True, text=True, timeout=60,
                            pass_fds=(w,))
    finally:
        os.close(r)
        os.close(w)
    assert plain.returncode == 0 and passed.returncode == 0, (plain.stderr, passed.stderr)
    assert json.loads(plain.stdout) == [0, 1, 2]
    assert json.loads(passed.stdout) == [0, 1, 2, w]   # live control: a passed one shows up


def test_server_survives_kill_and_stop(backend, tmp_path):
    with Sandbox(_policy(tmp_path), backend) as sb:
        # Live control: the same signals do reach a process of the command's own.
        ctl = sb.run(["sh", "-c", "sleep 1000 & k=$!; kill -STOP $k; sleep 0.2; "
                      "grep '^State' /proc/$k/status; kill -KILL $k; wait $k; echo status=$?"],
                     capture_output=True, text=True, timeout=60)
        assert "stopped" in ctl.stdout and "status=137" in ctl.stdout, ctl.stdout
        sb.run(["sh", "-c", "kill -KILL 1; kill -STOP 1; true"], timeout=60)
        for _ in range(2):
            done = sb.run(["echo", "still-here"], capture_output=True, text=True, timeout=60)
            assert done.stdout == "still-here\n"
        state = sb.run(["grep", "^State", "/proc/1/status"], capture_output=True, text=True, timeout=60)
        assert "stopped" not in state.stdout, state.stdout


# A chain ``depth`` processes deep below the command, the last one `sleep <needle>`.
def _chain(depth: int, needle: str) -> str:
    inner = f"sleep {needle}"
    for _ in range(depth - 1):
        inner = f"sh -c '{inner}; true'" if "'" not in inner else f'sh -c "{inner}; true"'
    return inner


@pytest.mark.parametrize("depth", [1, 3])
def test_killing_the_keeper_leaves_nothing(backend, tmp_path, monkeypatch, depth):
    """Without Landlock's signal scope (an older kernel; here PYSANDBOX_NO_LANDLOCK=1) a
    command can kill its keeper: the run still returns and nothing it made survives.
    With the scope the kill is refused (tests/security/test_keeper_attacks.py)."""
    monkeypatch.setenv("PYSANDBOX_NO_LANDLOCK", "1")
    needle = f"10{uuid.uuid4().int % 90 + 10}.5"   # a sleep length no other process has
    cmd = f"{_chain(depth, needle)} & sleep 0.3; {LIST} > before.txt; kill -KILL $PPID; sleep 20"
    out: list = []
    with Sandbox(_policy(tmp_path), backend) as sb:
        t = threading.Thread(target=lambda: out.append(sb.run(["sh", "-c", cmd], capture_output=True,
                                                                timeout=20)), daemon=True)
        t.start()
        t.join(45)   # generous; a leftover holding the pipes would keep it for 1000 s
        returned = not t.is_alive()
        left = _alive(sb, needle)
        again = sb.run(["echo", "ok"], capture_output=True, text=True, timeout=60)
    t.join(60)   # the session's end ends whatever held the run
    before = (tmp_path / "before.txt").read_text().splitlines()
    assert f"sleep {needle} " in before, before   # live control: it was running
    assert (returned, left) == (True, []), "the run returned / leftovers in the next command"
    assert out and out[0].returncode == -9, out
    assert again.stdout == "ok\n"


DAEMON = "trap '' TERM HUP; while :; do sleep 1; done; : {}"


def test_setsid_term_ignoring_leftover_dies_with_the_command(backend, tmp_path):
    marker = f"psb-{uuid.uuid4().hex[:8]}"
    with Sandbox(_policy(tmp_path), backend) as sb:
        first = sb.run(["sh", "-c", f"setsid sh -c \"{DAEMON.format(marker)}\" & sleep 0.3; {LIST}"],
                       capture_output=True, text=True, timeout=60)
        assert any(line.startswith("sh -c trap") and marker in line for line in first.stdout.splitlines())
        assert _alive(sb, marker) == []


def test_setsid_term_ignoring_leftover_dies_with_the_timeout(backend, tmp_path):
    marker = f"psb-{uuid.uuid4().hex[:8]}"
    with Sandbox(_policy(tmp_path), backend) as sb:
        with pytest.raises(subprocess.TimeoutExpired) as exc:
            sb.run(["sh", "-c", f"trap '' TERM; setsid sh -c \"{DAEMON.format(marker)}\" & sleep 0.3; {LIST}; wait"],
                   capture_output=True, timeout=1, kill_grace=0.5)
        lines = exc.value.stdout.decode().splitlines()
        assert any(line.startswith("sh -c trap") and marker in line for line in lines)   # live control
        assert _alive(sb, marker) == []
        assert sb.run(["true"], timeout=60).returncode == 0


def test_kill_of_one_command_spares_the_other(backend, tmp_path):
    a_mark, b_mark = "1041.5", "1042.5"
    start = "sleep {0} & setsid sh -c 'sleep {0}; true' & echo ready; wait"
    with Sandbox(_policy(tmp_path), backend) as sb:
        a = sb.Popen(["sh", "-c", start.format(a_mark)], stdout=subprocess.PIPE, text=True)
        b = sb.Popen(["sh", "-c", start.format(b_mark)], stdout=subprocess.PIPE, text=True)
        try:
            assert a.stdout.readline() == "ready\n" and b.stdout.readline() == "ready\n"
            assert len(_alive(sb, a_mark)) >= 2 and len(_alive(sb, b_mark)) >= 2   # live control
            a.kill()
            assert a.wait(timeout=60) == -9
            assert _alive(sb, a_mark) == []
            assert len(_alive(sb, b_mark)) >= 2 and b.poll() is None
        finally:
            for p in (a, b):
                p.kill()
                p.wait(timeout=60)
                p.stdout.close()
        assert _alive(sb, b_mark) == []


# 1 + 14 + 14*14 = 211 processes, each setsid'd and sleeping; the root says "ready" once
# every one has written its byte.
STORM = r'''
import os, sys, time
FAN, DEPTH = 14, 2
r, w = os.pipe()
def grow(level):
    for _ in range(FAN if level < DEPTH else 0):
        if os.fork() == 0:
            os.setsid()
            grow(level + 1)
            os.write(w, b"x")
            while True:
                time.sleep(1000)
grow(0)
want, got = FAN + FAN * FAN, 0
while got < want:
    got += len(os.read(r, want - got))
print("ready", flush=True)
while True:
    time.sleep(1000)
'''


def test_fork_storm_is_gone_after_kill(backend, tmp_path):
    marker = f"psb-storm-{uuid.uuid4().hex[:8]}"
    with Sandbox(_policy(tmp_path), backend) as sb:
        proc = sb.Popen([sys.executable, "-I", "-c", STORM, marker], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            assert len(_alive(sb, marker)) == 211   # live control: the whole storm is there
        finally:
            proc.kill()
            proc.wait(timeout=60)
            proc.stdout.close()
        assert proc.returncode == -9
        assert _alive(sb, marker) == []
