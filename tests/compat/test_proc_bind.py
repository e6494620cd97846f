"""``--bind /proc /proc`` (bwrap binds the host's procfs writable as told; its own suite
and nested runs through /proc/self/exe rely on it): pybwrap accepts it and puts the
read-only covers of a fresh procfs (``plan.PROC_READONLY``) on top, on both backends, so
the command still cannot write a host-global setting (invariant 9 of
docs/ARCHITECTURE.md). Nothing here writes a new value to a host setting: a file that
opens for writing gets its current value written back, and the host-global files are
only ever opened where the covers are expected to refuse the open."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pysandbox.plan import PROC_READONLY
from tests.compat.harness import BWRAP, PYBWRAP
from tests.security.test_procfs import _host_writable_proc_files
from tests.support import host_capability, need, not_applicable

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}

PROBE = r'''
import errno, json, os, sys
paths, write = json.loads(sys.argv[1]), sys.argv[2] == "write"
out = {"mounts": {}, "open": {}}
with open("/proc/self/mountinfo") as f:
    for line in f:
        fields = line.split()
        out["mounts"][fields[4]] = fields[5].split(",")[0]   # the innermost wins (read in order)
def attempt(path, write_back):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    try:
        if write_back:   # only ever the CURRENT value, never a new one
            with open(path, "rb") as f:
                os.write(fd, f.read())
    finally:
        os.close(fd)
    return "ok"
for p in paths:
    out["open"][p] = attempt(p, write)
out["open"]["control"] = attempt("/proc/self/comm", True)
out["host_pid_1"] = os.path.exists("/proc/1/comm")
print(json.dumps(out))
'''


def _need_native():
    why = host_capability("native")
    if why is not None:
        need("native", why)


def _probe(tool, env, option, paths, write):
    done = subprocess.run(tool + ["--ro-bind", "/", "/", option, "/proc", "/proc", sys.executable, "-c", PROBE,
                                  json.dumps(paths), "write" if write else "open"],
                          capture_output=True, text=True, env={**ENV, **env}, timeout=60)
    assert done.returncode == 0, (tool, env, option, done.stderr)
    return json.loads(done.stdout)


@pytest.mark.parametrize("option", ["--bind", "--dev-bind"])
@pytest.mark.parametrize("backend", ["native", "bwrap"])
def test_bind_of_host_procfs_gets_the_read_only_covers(backend, option):
    _need_native()
    found = _host_writable_proc_files()
    if os.geteuid() == 0:   # live control of the scan: root may write /proc/sys on the host
        assert "sys" in found, sorted(found)
    paths = [p for files in found.values() for p in files]
    got = _probe(PYBWRAP, {"PYBWRAP_BACKEND": backend}, option, paths, write=True)
    # The bind itself works and is writable: the host's procfs (its pid 1), and the
    # command's own /proc/self/comm takes its value back.
    assert got["mounts"]["/proc"] == "rw" and got["host_pid_1"], got
    assert got["open"]["control"] == "ok", got
    covered = {f"/proc/{e}" for e in PROC_READONLY if os.path.lexists(f"/proc/{e}")}
    assert covered and {m: got["mounts"].get(m) for m in covered} == dict.fromkeys(covered, "ro"), got["mounts"]
    opened = {p: r for p, r in got["open"].items() if p != "control" and r not in ("EROFS", "EACCES", "EPERM")}
    assert opened == {}, opened


def test_bwrap_itself_leaves_the_host_procfs_writable_to_root():
    """Why the covers matter (and the test above can fail): bwrap 0.8 with the same
    command line lets a root caller open /proc/sys files for writing (nothing is
    written: opened and closed)."""
    _need_native()
    if not os.access(BWRAP, os.X_OK):
        need("bwrap", f"{BWRAP} is missing")
    if os.geteuid() != 0:
        not_applicable("an unprivileged caller cannot write /proc/sys on the host either")
    found = _host_writable_proc_files()
    sys_files = found.get("sys", [])
    assert sys_files, sorted(found)
    got = _probe([BWRAP], {}, "--bind", sys_files, write=False)
    assert got["mounts"]["/proc"] == "rw" and got["open"]["control"] == "ok", got
    assert "ok" in {got["open"][p] for p in sys_files}, got["open"]


def test_writable_bind_of_a_procfs_entry_is_still_refused():
    """Only the whole procfs gets the covers; ``--bind /proc/sys X`` stays refused before
    the launch (bwrap runs it). The control: ``--ro-bind /proc/sys X`` runs."""
    _need_native()
    base = PYBWRAP + ["--ro-bind", "/", "/", "--tmpfs", "/tmp", "--dir", "/tmp/s"]
    bad = subprocess.run(base + ["--bind", "/proc/sys", "/tmp/s", "true"], capture_output=True, text=True,
                         env=ENV, timeout=60)
    assert bad.returncode == 1 and "writable bind of the host's procfs" in bad.stderr, bad
    ok = subprocess.run(base + ["--ro-bind", "/proc/sys", "/tmp/s", "true"], capture_output=True, text=True,
                        env=ENV, timeout=60)
    assert ok.returncode == 0, ok.stderr
