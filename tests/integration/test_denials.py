"""Denials reported on the command's result (pysandbox/denials.py, issue 32), on both
backends: each kind recorded with the kernel's own refusal unchanged, the same operation
allowed by the policy leaving no record (the control), and a hostile command that floods,
races threads, changes a path between the call and the record, and outlives its observer.

Connect attempts go only to 192.0.2.1 (TEST-NET-1) from a deny-mode sandbox whose
namespace the probe first checks holds ``lo`` alone, so no packet can leave the machine.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

import pysandbox
from pysandbox.denials import MAX_RECORDS, summary

pytestmark = pytest.mark.requires("userns")

PROBE = r'''
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def sysc(nr, *a):
    r = libc.syscall(nr, *[ctypes.c_long(x) for x in a])
    return 0 if r >= 0 else -ctypes.get_errno()
def opn(path, flags=os.O_WRONLY | os.O_CREAT):
    try:
        os.close(os.open(path, flags, 0o644))
        return 0
    except OSError as e:
        return -e.errno
work = sys.argv[1]
out = {"links": sorted(n for _i, n in socket.if_nameindex())}
out["etc"] = opn("/etc/hosts", os.O_WRONLY | os.O_APPEND)
try:
    os.mkdir("/usr/psb-denial-probe"); out["mkdir"] = 0
except OSError as e:
    out["mkdir"] = -e.errno
out["work"] = opn(os.path.join(work, "allowed.txt"))
out["tmp"] = opn("/tmp/allowed.txt")
out["rel"] = opn("relative-allowed.txt")
out["keyctl"] = sysc(250, 0, 0, 0, 0)      # keyctl(KEYCTL_GET_KEYRING_ID)
out["bpf"] = sysc(321, 0, 0, 0)            # bpf(BPF_MAP_CREATE, NULL, 0)
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.socket(); out["loop"] = c.connect_ex(srv.getsockname()); c.close(); srv.close()
if out["links"] == ["lo"]:                 # deny mode holds lo alone: nothing can leave
    c = socket.socket(); out["off"] = c.connect_ex(("192.0.2.1", 9)); c.close()
print(json.dumps(out))
'''


def _run(backend, tmp_path, script, *args, **policy):
    policy.setdefault("report_denials", True)
    pol = pysandbox.Policy.default(workdir=tmp_path, **policy)
    done = pysandbox.run([sys.executable, "-I", "-c", script, str(tmp_path), *args], policy=pol, backend=backend,
                         capture_output=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().splitlines()[-1]), done.denials


def _by_kind(denials, kind):
    return {d.target: d for d in denials if d.kind == kind}


def test_each_kind_recorded_and_allowed_operations_leave_none(backend, tmp_path):
    out, denials = _run(backend, tmp_path, PROBE)
    assert out["links"] == ["lo"]
    # the kernel's refusals, unchanged by the observer (an unprivileged caller's command
    # is refused opening a root-owned file by its permissions first: EACCES; creating
    # checks the mount first)
    assert out["etc"] == (-errno.EROFS if os.getuid() == 0 else -errno.EACCES) and out["mkdir"] == -errno.EROFS
    assert out["keyctl"] == out["bpf"] == -errno.EPERM
    assert out["off"] == errno.ENETUNREACH
    # the allowed operations of the same kinds succeeded (the controls) ...
    assert out["work"] == out["tmp"] == out["rel"] == out["loop"] == 0
    assert (tmp_path / "allowed.txt").exists() and (tmp_path / "relative-allowed.txt").exists()
    # ... and left no record; each refusal has one
    writes = _by_kind(denials, "write")
    assert set(writes) == {"/etc/hosts", "/usr/psb-denial-probe"}, denials
    assert all(d.errno == errno.EROFS and d.pid > 0 for d in writes.values())
    assert set(_by_kind(denials, "syscall")) == {"keyctl", "bpf"}
    assert _by_kind(denials, "syscall")["keyctl"].errno == errno.EPERM
    assert set(_by_kind(denials, "connect")) == {"192.0.2.1:9"}
    assert denials.cut == 0
    assert "write /etc/hosts (EROFS)" in summary(denials)


def test_off_by_default_with_the_same_refusals(backend, tmp_path):
    out, denials = _run(backend, tmp_path, PROBE, report_denials=False)
    assert denials is None
    assert out["etc"] == (-errno.EROFS if os.getuid() == 0 else -errno.EACCES) and out["mkdir"] == -errno.EROFS
    assert out["keyctl"] == out["bpf"] == -errno.EPERM
    assert out["off"] == errno.ENETUNREACH and out["work"] == 0


def test_an_opted_in_call_is_not_a_denial(backend, tmp_path):
    out, denials = _run(backend, tmp_path, PROBE, allow_syscalls={"bpf"})
    assert out["keyctl"] == -errno.EPERM   # the kernel's answer to bpf is the host's affair
    assert "bpf" not in _by_kind(denials, "syscall") and "keyctl" in _by_kind(denials, "syscall")


FLOOD = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
work, n = sys.argv[1], int(sys.argv[2])
refused = 0
for i in range(n):
    for path in ("/etc/psb-flood-%d" % i, "/etc/hosts"):
        try:
            os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as e:
            refused += e.errno in (13, 30)   # EACCES first for an unprivileged caller
    refused += libc.syscall(250, 0, 0, 0, 0) < 0
with open(os.path.join(work, "after-flood.txt"), "w") as f:
    f.write("ok")
print(json.dumps({"refused": refused}))
'''


def test_a_flood_is_counted_and_bounded(backend, tmp_path):
    n = 3 * MAX_RECORDS
    out, denials = _run(backend, tmp_path, FLOOD, str(n))
    assert out["refused"] == 3 * n   # every call refused by the kernel, none stalled
    assert (tmp_path / "after-flood.txt").read_text() == "ok"   # the command went on (control)
    assert len(denials) == MAX_RECORDS and denials.cut > 0
    counted = {d.target: d.count for d in denials}
    assert counted["/etc/hosts"] == n and counted["keyctl"] == n
    assert "more not listed" in summary(denials)


RACE = r'''
import ctypes, json, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
work = sys.argv[1]
# one buffer, its path flipped by a thread between the call and the observer's read
inside = os.path.join(work, "x" * 8).encode()
outside = ("/etc/" + "y" * (len(inside) - 5)).encode()
buf = ctypes.create_string_buffer(outside, len(inside) + 1)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, inside, len(inside)); ctypes.memmove(buf, outside, len(outside))
res = {"created_outside": 0, "keyctl_ok": 0, "opened": 0, "erofs": 0, "other": []}
def attack():
    for _ in range(300):
        fd = libc.open(buf, os.O_WRONLY | os.O_CREAT, 0o644)
        if fd >= 0:
            res["opened"] += 1; libc.close(fd)
        elif ctypes.get_errno() in (13, 30):
            res["erofs"] += 1
        else:
            res["other"].append(ctypes.get_errno())   # the kernel read a half-flipped path
        if libc.syscall(250, 0, 0, 0, 0) >= 0:
            res["keyctl_ok"] += 1
flipper = threading.Thread(target=flip); flipper.start()
threads = [threading.Thread(target=attack) for _ in range(6)]
[t.start() for t in threads]; [t.join() for t in threads]
stop = True; flipper.join()
res["created_outside"] = int(os.path.exists(outside))
print(json.dumps(res))
'''


def test_racing_threads_and_a_changing_path_never_change_a_decision(backend, tmp_path):
    out, denials = _run(backend, tmp_path, RACE)
    assert out["keyctl_ok"] == 0 and out["created_outside"] == 0
    # the kernel itself may read the buffer half flipped: a path with no directory there
    assert out["opened"] + out["erofs"] + len(out["other"]) == 6 * 300
    assert set(out["other"]) <= {errno.ENOENT}, out["other"]
    # the records may be wrong (the observer may read the buffer half flipped: a path that
    # is neither string), but there is at most one per observed call
    assert sum(d.count for d in _by_kind(denials, "write").values()) <= 6 * 300
    assert _by_kind(denials, "syscall")["keyctl"].count == 6 * 300


DEATH = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
work = sys.argv[1]
def probe(tag):
    k = libc.syscall(250, 0, 0, 0, 0); ke = ctypes.get_errno()
    fd = libc.open(os.path.join(work, tag).encode(), os.O_WRONLY | os.O_CREAT, 0o644); we = ctypes.get_errno()
    if fd >= 0:
        libc.close(fd)
    return {"keyctl": 0 if k >= 0 else ke, "write": 0 if fd >= 0 else we}
before = probe("before")
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps({"before": before, "after": probe("after")}), flush=True)
'''


def test_without_its_observer_the_command_continues_and_stays_refused(backend, tmp_path):
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
    with pysandbox.Popen([sys.executable, "-I", "-c", DEATH, str(tmp_path)], policy=pol, backend=backend,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().strip() == "ready"
        import fcntl
        # the listener the launcher holds is close-on-exec: no other child of it inherits one
        assert fcntl.fcntl(proc._observer._listener, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        proc._observer._stop = True   # the observer dies: its thread ends, the listener closes
        proc._observer._thread.join()
        proc._observer.finish()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        res = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=60) == 0
    # live control: with the observer, keyctl EPERM and the allowed write done
    assert res["before"] == {"keyctl": errno.EPERM, "write": 0}
    # without it the kernel answers ENOSYS: the refused call stays refused, and the
    # observed write fails closed instead of hanging
    assert res["after"] == {"keyctl": errno.ENOSYS, "write": errno.ENOSYS}
    assert not (tmp_path / "after").exists()


def test_cli_prints_the_summary_line_only_with_the_option(backend, tmp_path):
    cmd = [sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--workdir", str(tmp_path)]
    script = ["--", "sh", "-c", "touch /etc/psb-cli-denial ok-file; exit 3"]
    done = subprocess.run(cmd + ["--report-denials"] + script, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3
    assert "pysandbox: denied: write /etc/psb-cli-denial (EROFS)" in done.stderr
    assert "ok-file" not in done.stderr.split("pysandbox: denied:")[-1]
    plain = subprocess.run(cmd + script, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert plain.returncode == 3 and "pysandbox: denied" not in plain.stderr


def test_asyncio_run_carries_the_denials(backend, tmp_path):
    import asyncio
    from pysandbox import aio
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
    done = asyncio.run(aio.run(["sh", "-c", "touch /etc/psb-aio-denial; touch ok"], policy=pol, backend=backend,
                               capture_output=True, timeout=120))
    assert [d.target for d in done.denials] == ["/etc/psb-aio-denial"]


def test_a_refusal_right_before_the_exit_is_recorded(backend, tmp_path):
    # as_pid_1: touch is the sandbox's pid 1 and its refused utimensat (after the refused
    # openat) is the last thing it does; the record is made after the answer, from a view
    # of the process taken before it (without that view the exit raced the record)
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True, as_pid_1=True)
    for _ in range(3):
        done = pysandbox.run(["touch", "/etc/psb-last"], policy=pol, backend=backend, timeout=120,
                             capture_output=True)
        assert done.returncode == 1
        assert [(d.kind, d.target, d.count) for d in done.denials] == [("write", "/etc/psb-last", 2)]


def test_an_observer_that_fails_never_leaves_a_call_waiting(backend, tmp_path, monkeypatch):
    # a bug of ours in the observer thread: it ends, the listener closes with it, the
    # kernel answers ENOSYS (refused) instead of the call waiting for ever
    import threading
    from pysandbox import denials as D

    def broken(self):
        raise RuntimeError("an observer bug")
    monkeypatch.setattr(D.Observer, "_one", broken)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    pol = pysandbox.Policy.default(workdir=tmp_path, report_denials=True)
    script = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "r = libc.syscall(250, 0, 0, 0, 0)\nprint(ctypes.get_errno() if r < 0 else 0)")
    done = pysandbox.run([sys.executable, "-I", "-c", script], policy=pol, backend=backend, capture_output=True,
                         timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert int(done.stdout.decode().split()[-1]) == errno.ENOSYS
    assert list(done.denials) == []


def test_a_terminal_of_its_own_with_denials(backend, tmp_path):
    # native opens the sandbox's pty after the filter is loaded: that openat is observed
    # while the launcher still waits for the exec (the observer serves from before the
    # spawn; before that fix this launch never returned)
    cmd = [sys.executable, "-m", "pysandbox", "run", "--backend", backend, "--workdir", str(tmp_path), "--tty",
           "--report-denials", "--", "sh", "-c", "touch /etc/psb-tty; touch ok"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "pysandbox: denied: write /etc/psb-tty (EROFS)" in done.stderr, done.stderr
    assert (tmp_path / "ok").exists()


PROXY_PROBE = r'''
import json, os, socket
out = {"links": sorted(n for _i, n in socket.if_nameindex())}
port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1].strip("/"))
s = socket.create_connection(("127.0.0.1", port), timeout=30)       # the proxy: loopback, allowed
s.sendall(b"CONNECT blocked.invalid:443 HTTP/1.1\r\nHost: blocked.invalid:443\r\n\r\n")
out["proxy_answer"] = s.recv(64).split(b" ")[1].decode()
s.close()
if out["links"] == ["lo"]:                 # proxy mode's namespace holds lo alone
    c = socket.socket(); out["direct"] = c.connect_ex(("192.0.2.1", 9)); c.close()
print(json.dumps(out))
'''


def test_proxy_mode_direct_attempts_and_proxy_refusals(backend, tmp_path):
    pol = pysandbox.Policy.default(workdir=tmp_path, network="proxy", allow_hosts=("allowed.invalid",),
                                   report_denials=True)
    done = pysandbox.run([sys.executable, "-I", "-c", PROXY_PROBE], policy=pol, backend=backend, capture_output=True,
                         timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout.decode().splitlines()[-1])
    assert out["links"] == ["lo"] and out["direct"] == errno.ENETUNREACH
    assert out["proxy_answer"] == "403"
    got = {(d.target, d.errno) for d in done.denials if d.kind == "connect"}
    # the direct attempt (the kernel's refusal) and the proxy's refusal; the connection to
    # the proxy itself (loopback) is no denial
    assert got == {("192.0.2.1:9", errno.ENETUNREACH), ("blocked.invalid:443", errno.EACCES)}, done.denials
