"""The probe reports what it claims, checked against the host it runs on (no sandbox)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from . import runner


def _probe(args, **kw):
    done = subprocess.run([sys.executable, "-c", runner.PROBE_SOURCE, json.dumps(args)],
                          capture_output=True, timeout=60, **kw)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


@pytest.mark.requires("pyroute2")
def test_probe_on_the_host(tmp_path):
    (tmp_path / "d").mkdir(mode=0o711)
    (tmp_path / "f").write_bytes(b"abc")
    os.symlink("f", tmp_path / "l")
    doc = _probe({"paths": [str(tmp_path)], "caller_ns": runner.caller_namespaces()},
                 cwd=tmp_path, env={"ONLY": "this"})
    assert set(doc["namespaces"].values()) == {"same"}
    assert doc["cwd"] == str(tmp_path)
    assert doc["env"]["ONLY"] == "this"
    assert doc["pid"] != 1 and doc["uid"] == [os.getuid(), os.geteuid()]
    entries = doc["paths"][str(tmp_path)]["entries"]
    assert entries["d"]["type"] == "d" and entries["d"]["mode"] == "0o711"
    assert entries["f"] == {"type": "f", "mode": entries["f"]["mode"], "uid": os.getuid(),
                            "gid": os.getgid(), "size": 3, "data": b"abc".hex()}
    assert entries["l"]["target"] == "f"
    with open("/proc/self/mountinfo") as f:
        assert len(doc["mounts"]) == len(f.read().splitlines())
    assert {m["mountpoint"] for m in doc["mounts"]} >= {"/", "/proc"}
    assert "lo" in {link["name"] for link in doc["network"]["links"]}
    with open("/proc/self/status") as f:
        mine = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    assert doc["status"]["NoNewPrivs"] == mine["NoNewPrivs"].strip()
    assert doc["status"]["CapBnd"] == mine["CapBnd"].strip()
    assert doc["unix_socket"] == "ok"


def test_probe_reports_new_namespaces_as_new():
    # a caller whose inode numbers differ: every namespace reads as new
    doc = _probe({"caller_ns": {n: 1 for n in ("user", "mnt", "pid", "ipc", "uts", "net", "cgroup")},
                  "paths": []})
    assert set(doc["namespaces"].values()) == {"new"}


def test_probe_reports_passed_descriptors():
    r, w = os.pipe()
    try:
        doc = _probe({"paths": []}, pass_fds=(r,))
    finally:
        os.close(r)
        os.close(w)
    assert doc["fds"].get(str(r)) == "pipe"
