"""Negative twins of the bwrap backend: bwrap missing, setuid, refusing --unshare-net, lacking an
option, inside a writable path. Each failure is exit 125 with the reason code, and the command
provably did not run (the marker it would create is absent); each has a control that runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pysandbox import plan as P
from pysandbox.backends.bwrap import BwrapBackend
from pysandbox.errors import NetworkNamespaceUnavailable, Reason
from pysandbox.policy import Policy

from tests.support.constrained import NO_BUNDLED_BWRAP_DIR

pytestmark = pytest.mark.requires("bwrap")

NETNS_REFUSED = ("bwrap: No permissions to creating new namespace, likely because the kernel does not "
                 "allow non-privileged user namespaces.")


def real_bwrap() -> str:
    found = shutil.which("bwrap")
    assert found, "the bwrap capability said bwrap works"
    return os.path.realpath(found)


@pytest.fixture
def box(tmp_path):
    """``box.run(*args, env=...)`` runs ``pysandbox run --backend bwrap ARGS -- sh -c ": > marker"``."""
    class Box:
        wd = tmp_path / "wd"
        bin = tmp_path / "bin"
        marker = tmp_path / "wd" / "marker"

        def cli(self, *args, env=None, cmd=("/bin/sh", "-c", ": > marker")):
            full = {k: v for k, v in os.environ.items() if not k.startswith("PYSANDBOX_") or k == "PYSANDBOX_MUST_WORK"}
            full.update(env or {})
            return subprocess.run([sys.executable, "-m", "pysandbox", *args, *(["--", *cmd] if cmd else [])],
                                  cwd=self.wd, env=full, capture_output=True, text=True, timeout=120)

        def run(self, *args, env=None):
            return self.cli("run", "--backend", "bwrap", *args, env=env)

        def script(self, name, body):
            path = self.bin / name
            path.write_text("#!/bin/sh\n" + body)
            path.chmod(0o755)
            return path

    b = Box()
    b.wd.mkdir()
    b.bin.mkdir()
    return b


def assert_refused(done, reason, box):
    assert done.returncode == 125, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pysandbox: {reason}: "), done.stderr
    assert not box.marker.exists()


def assert_ran(done, box):
    assert done.returncode == 0, done.stderr
    assert box.marker.exists()
    box.marker.unlink()


def test_control_real_bwrap_runs(box):
    assert_ran(box.run(env={"PYSANDBOX_BWRAP": real_bwrap()}), box)


def test_bwrap_not_on_path(box):
    # no bwrap on PATH and no bundled one (pysandbox[bwrap] hidden; tests/integration/
    # test_bwrap_bundled.py runs the bundled one)
    hidden = {"PATH": str(box.bin), "PYTHONPATH": NO_BUNDLED_BWRAP_DIR}
    assert_refused(box.run(env=hidden), Reason.BWRAP_NOT_FOUND.value, box)
    # control: the same PATH plus a symlink to the real bwrap works
    os.symlink(real_bwrap(), box.bin / "bwrap")
    assert_ran(box.run(env=hidden), box)


def test_bwrap_env_pointing_nowhere(box):
    assert_refused(box.run(env={"PYSANDBOX_BWRAP": str(box.bin / "nowhere")}), Reason.BWRAP_NOT_FOUND.value, box)


def test_setuid_copy_rejected(box):
    copy = box.bin / "bwrap"
    shutil.copy2(real_bwrap(), copy)
    copy.chmod(0o4755)
    assert os.stat(copy).st_mode & 0o4000
    assert_refused(box.run(env={"PYSANDBOX_BWRAP": str(copy)}), Reason.BWRAP_SETUID_REJECTED.value, box)
    # opting in runs it
    assert_ran(box.run(env={"PYSANDBOX_BWRAP": str(copy), "PYSANDBOX_ALLOW_SETUID_BWRAP": "1"}), box)
    # control: the same copy without the bit runs
    copy.chmod(0o755)
    assert_ran(box.run(env={"PYSANDBOX_BWRAP": str(copy)}), box)


def test_bwrap_inside_workdir_refused(box):
    inside = box.wd / "bwrap"
    shutil.copy2(real_bwrap(), inside)
    assert_refused(box.run(env={"PYSANDBOX_BWRAP": str(inside)}), Reason.BWRAP_IN_WRITABLE_PATH.value, box)
    outside = box.bin / "bwrap"
    shutil.copy2(real_bwrap(), outside)
    assert_ran(box.run(env={"PYSANDBOX_BWRAP": str(outside)}), box)


def refusing_wrapper(box, option, message):
    """A bwrap that fails like bwrap when ``option`` is asked for (in argv or in --args FD)."""
    return box.script("bwrap", f"""
fail() {{ echo "{message}" >&2; exit 1; }}
prev=
for a in "$@"; do
  [ "$a" = "{option}" ] && fail
  if [ "$prev" = --args ] && tr '\\0' '\\n' < /proc/self/fd/$a | grep -qx -- "{option}"; then fail; fi
  [ "$a" = -- ] && break
  prev=$a
done
exec {real_bwrap()} "$@"
""")


def test_wrapper_refusing_unshare_net(box):
    wrapper = refusing_wrapper(box, "--unshare-net", NETNS_REFUSED)
    env = {"PYSANDBOX_BWRAP": str(wrapper)}
    st = box.cli("status", "--backend", "bwrap", "--json", env=env, cmd=None)
    assert st.returncode == 1, st.stderr
    got = json.loads(st.stdout)
    assert got["available"] is False and got["reason"] == "network_namespace_unavailable"
    assert got["network"]["deny"]["available"] is False
    assert got["network"]["deny"]["reason"] == "network_namespace_unavailable"
    assert got["network"]["allow"]["available"] is True
    caps = {c["name"]: c for c in got["backends"]["bwrap"]["capabilities"]}
    assert caps["user"]["available"] and caps["mount"]["available"] and caps["pid"]["available"]
    assert caps["net"]["available"] is False and caps["net"]["reason"] == "network_namespace_unavailable"
    allow = box.cli("status", "--backend", "bwrap", "--network", "allow", "--json", env=env, cmd=None)
    assert allow.returncode == 0 and json.loads(allow.stdout)["available"] is True
    # a deny launch fails closed; allow runs (control)
    assert_refused(box.run("--network", "deny", env=env), "network_namespace_unavailable", box)
    assert_ran(box.run("--network", "allow", env=env), box)


def test_wrapper_refusing_unshare_net_in_process(box):
    backend = BwrapBackend(str(refusing_wrapper(box, "--unshare-net", NETNS_REFUSED)))
    deny = P.compile(Policy.default(workdir=str(box.wd), network="deny"))
    with pytest.raises(NetworkNamespaceUnavailable) as info:
        backend.check(deny)
    assert info.value.reason == Reason.NETWORK_NAMESPACE_UNAVAILABLE
    with pytest.raises(NetworkNamespaceUnavailable):   # cached per plan, still refused
        backend.check(deny)
    backend.check(P.compile(Policy.default(workdir=str(box.wd), network="allow")))


def test_wrapper_failing_proc_mount(box):
    wrapper = refusing_wrapper(box, "--proc", "bwrap: Can't mount proc on /newroot/proc: Operation not permitted")
    env = {"PYSANDBOX_BWRAP": str(wrapper)}
    assert_refused(box.run(env=env), Reason.PROC_MOUNT_FAILED.value, box)
    got = json.loads(box.cli("status", "--backend", "bwrap", "--json", env=env, cmd=None).stdout)
    caps = {c["name"]: c for c in got["backends"]["bwrap"]["capabilities"]}
    assert caps["proc"]["reason"] == "proc_mount_failed" and caps["pid"]["available"]


def test_wrapper_failing_user_namespace(box):
    wrapper = refusing_wrapper(box, "--unshare-user", "bwrap: setting up uid map: Permission denied")
    env = {"PYSANDBOX_BWRAP": str(wrapper)}
    assert_refused(box.run(env=env), Reason.USER_NAMESPACE_UNAVAILABLE.value, box)


def test_bwrap_lacking_an_option(box):
    real = real_bwrap()
    wrapper = box.script("bwrap", f"""
if [ "$1" = --help ]; then {real} --help | grep -v -- --disable-userns; exit 0; fi
exec {real} "$@"
""")
    assert_refused(box.run(env={"PYSANDBOX_BWRAP": str(wrapper)}), Reason.BWRAP_OPTION_UNSUPPORTED.value, box)


def test_unknown_option_message_maps_to_option_unsupported(box):
    wrapper = refusing_wrapper(box, "--disable-userns", "bwrap: Unknown option --disable-userns")
    assert_refused(box.run(env={"PYSANDBOX_BWRAP": str(wrapper)}), Reason.BWRAP_OPTION_UNSUPPORTED.value, box)


def test_long_argument_lists_go_through_args_fd(box, tmp_path):
    dirs = []
    for i in range(300):
        d = tmp_path / "many" / f"dir-{i:03d}-{'x' * 100}"
        d.mkdir(parents=True)
        dirs.append(str(d))
    args = [w for d in dirs for w in ("--ro", d)]
    done = box.cli("run", "--backend", "bwrap", *args, env={"PYSANDBOX_BWRAP": real_bwrap()},
                   cmd=("/bin/sh", "-c", f'test -d "{dirs[-1]}" && : > marker'))
    assert_ran(done, box)


def test_setup_failure_found_by_the_exact_argument_probe(box):
    # bwrap would fail at chdir after building the sandbox, with exit 1 like a command;
    # the probe with the policy's own arguments catches it first. (A missing host-backed,
    # tmpfs, /proc or /dev entry is a policy error before any launch, exit 2:
    # tests/integration/test_cli_errors.py; below /dev/shm, made empty by the setup, only
    # the launch tells.)
    done = box.run("--chdir", "/dev/shm/nonexistent-pysandbox-dir", env={"PYSANDBOX_BWRAP": real_bwrap()})
    assert_refused(done, Reason.BWRAP_PROBE_FAILED.value, box)
    assert "chdir" in done.stderr


def test_setup_failure_after_the_probe_is_typed(box, tmp_path):
    # The probe passed, then the host changed: bwrap fails during setup with exit 1.
    # spawn sees bwrap end before the command ran and probes again: a typed error.
    from pysandbox.backends.base import Launch
    from pysandbox.errors import SandboxError
    data = tmp_path / "data"
    data.mkdir()
    plan = P.compile(Policy.default(workdir=str(box.wd), ro=[str(data)]))
    backend = BwrapBackend(real_bwrap())
    argv = ["/bin/sh", "-c", ": > marker"]
    first = backend.spawn(plan, Launch(argv=argv, env=dict(os.environ)))
    _, status = os.waitpid(first.pid, 0)
    assert first.returncode(status) == 0 and box.marker.exists()   # control
    box.marker.unlink()
    os.rmdir(data)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with pytest.raises(SandboxError) as info:
            backend.spawn(plan, Launch(argv=argv, env=dict(os.environ), stderr=devnull))
    finally:
        os.close(devnull)
    assert info.value.reason == Reason.BIND_SOURCE_MISSING
    assert not box.marker.exists()
