"""Writes outside the writable paths fail and leave the host file unchanged (root inside
and out included; no remount, no unmount); /tmp is private; /proc shows only the
sandbox's processes."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid

import pytest

import pysandbox
from tests.security import oracles

pytestmark = pytest.mark.requires("userns")

WRITE_SCRIPT = oracles.PRELUDE + r'''
import ctypes
ro, work = sys.argv[1], sys.argv[2]
victim = os.path.join(ro, "victim")
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    step(name)
    if getattr(libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
MS_REMOUNT, MS_BIND, MS_RDONLY, MNT_DETACH = 32, 4096, 1, 2
def tries(prefix):
    step("open"); attempt(prefix + "open_w", lambda: open(victim, "w").close())
    step("open"); attempt(prefix + "open_a", lambda: open(victim, "a").close())
    step("truncate"); attempt(prefix + "truncate", lambda: os.truncate(victim, 0))
    step("unlink"); attempt(prefix + "unlink", lambda: os.unlink(victim))
    step("rename"); attempt(prefix + "rename", lambda: os.rename(victim, victim + ".moved"))
    step("chmod"); attempt(prefix + "chmod", lambda: os.chmod(victim, 0o777))
    step("utime"); attempt(prefix + "utime", lambda: os.utime(victim, (0, 0)))
    step("mkdir"); attempt(prefix + "mkdir", lambda: os.mkdir(os.path.join(ro, "newdir")))
    step("symlink"); attempt(prefix + "symlink", lambda: os.symlink("/", os.path.join(ro, "newlink")))
    step("open"); attempt(prefix + "create", lambda: open(os.path.join(ro, "newfile"), "x").close())
    step("open"); attempt(prefix + "etc", lambda: open("/etc/hostname", "a").close())
tries("")
attempt("remount_rw", lambda: call("mount", None, ro.encode(), None, MS_REMOUNT | MS_BIND, None))
attempt("remount_root_rw", lambda: call("mount", None, b"/", None, MS_REMOUNT | MS_BIND, None))
attempt("umount", lambda: call("umount2", ro.encode(), MNT_DETACH))
attempt("bind_over", lambda: call("mount", work.encode(), ro.encode(), None, MS_BIND, None))
tries("after:")
step("open"); attempt("control", lambda: open(os.path.join(work, "written"), "w").write("from sandbox"))
done()
'''

WRITES = ("open_w", "open_a", "truncate", "unlink", "rename", "chmod", "utime", "mkdir", "symlink", "create", "etc")


def _snapshot(path):
    out = {}
    for name in sorted(os.listdir(path)):
        st = os.lstat(os.path.join(path, name))
        data = open(os.path.join(path, name), "rb").read() if name == "victim" else None
        out[name] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_uid, data)
    return out


@pytest.mark.parametrize("uid", [None, 0])
def test_writes_outside_writable_paths_fail(backend, tmp_path, uid):
    ro, work = tmp_path / "ro", tmp_path / "work"
    ro.mkdir()
    work.mkdir()
    (ro / "victim").write_text("original")
    before = _snapshot(ro)
    etc_before = open("/etc/hostname", "rb").read(), os.stat("/etc/hostname").st_mtime_ns
    policy = pysandbox.Policy.default(workdir=work, ro=[ro], uid=uid, gid=uid)
    res = oracles.run_probe(WRITE_SCRIPT, policy, backend, (ro, work))
    assert res["control"]["ok"] and (work / "written").read_text() == "from sandbox", res["control"]
    for prefix in ("", "after:"):
        for name in WRITES:
            got = res[prefix + name]
            assert got["ok"] is False, (prefix + name, got)
            assert got["errno"] in (errno.EROFS, errno.EACCES, errno.EPERM), (prefix + name, got)
    for name in ("remount_rw", "remount_root_rw", "umount", "bind_over"):
        assert res[name]["ok"] is False and res[name]["errno"] in (errno.EPERM, errno.EINVAL), (name, res[name])
    assert _snapshot(ro) == before
    assert (open("/etc/hostname", "rb").read(), os.stat("/etc/hostname").st_mtime_ns) == etc_before


TMP_SCRIPT = oracles.PRELUDE + r'''
host_file, mine, work = sys.argv[1], sys.argv[2], sys.argv[3]
RESULTS["sees_host_tmp"] = os.path.exists(host_file)
RESULTS["sees_workdir"] = os.path.isdir(work)
step("open"); attempt("write_tmp", lambda: open(mine, "w").write("x"))
done()
'''


def test_tmp_is_private(backend, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    host_file = tmp_path / ("hostonly-" + uuid.uuid4().hex)
    host_file.write_text("host")
    mine = f"/tmp/psb-sandbox-{uuid.uuid4().hex}"
    res = oracles.run_probe(TMP_SCRIPT, pysandbox.Policy.default(workdir=work), backend, (host_file, mine, work))
    assert res["sees_workdir"] is True          # control: /tmp paths that are bound are visible
    assert res["sees_host_tmp"] is False
    assert res["write_tmp"]["ok"] is True       # the sandbox has a /tmp of its own ...
    assert not os.path.exists(mine)             # ... that never reaches the host


PROC_SCRIPT = oracles.PRELUDE + r'''
marker = sys.argv[1][::-1]   # passed reversed, so the probe's own argv does not match
pids, hits, self_hits = [], [], []
for p in os.listdir("/proc"):
    if p.isdigit():
        pids.append(int(p))
        try:
            cmdline = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            hits.append(int(p))
        if sys.argv[2].encode() in cmdline:
            self_hits.append(int(p))
RESULTS["self_hits"] = self_hits
RESULTS["pids"] = sorted(pids)
RESULTS["hits"] = hits
RESULTS["me"] = os.getpid()
done()
'''


def test_proc_shows_only_the_sandbox(backend, tmp_path):
    marker = "psbhost" + uuid.uuid4().hex
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker])
    try:
        deadline = time.monotonic() + 30
        while oracles.host_pids_with(marker) != [host.pid] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert oracles.host_pids_with(marker) == [host.pid]    # control: the marker is findable
        res = oracles.run_probe(PROC_SCRIPT, pysandbox.Policy.default(workdir=tmp_path), backend,
                                 (marker[::-1], "psbself" + uuid.uuid4().hex))
    finally:
        host.kill()
        host.wait(timeout=30)
    assert res["me"] in res["self_hits"], res   # control: the scan finds a marked process
    assert res["hits"] == [], res
    assert res["me"] in res["pids"] and len(res["pids"]) <= 3, res   # init (if any), the command
    assert max(res["pids"]) < 10, res
