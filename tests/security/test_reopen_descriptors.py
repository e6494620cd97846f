"""A descriptor given to the command cannot be reopened, through a magic link, with more
than it allows (native/psb_landlock.h, pysandbox/backends/landlock.py; THREAT_MODEL.md).

The hole: ``/proc/self/fd/N`` (``/dev/stdin``) jumps to the file's own mount, the
host's, read-write, and root in the sandbox's user namespace passes DAC as the file's
owner: ``pysandbox run -- sh -c 'echo pwned > /dev/stdin' < ~/.bashrc`` rewrote the
caller's file. The command's filesystem domain handles writing and grants it only beneath
the plan's writable mounts and on the descriptors that already allow it, so:

* a read-only stdin, and a read-only pass_fds file, cannot be reopened for writing,
  appending or truncating: the file is unchanged;
* a FIFO on a read-only bind cannot be opened for writing (EROFS covers regular files and
  directories only);
* what must keep working does: ``cat /dev/stdin``, ``> /dev/stdout`` to a file,
  ``> /dev/stderr``, writes in the workdir, /tmp, /dev/null and /proc/self, ``mv`` across
  directories in /tmp and in the workdir, a pass_fds directory used with openat.

Live controls, in the same test: the same attack without Landlock
(``PYSANDBOX_NO_LANDLOCK=1``) and by a command that may mount (``allow_nested_userns``:
no filesystem domain, documented as not protected) succeeds and changes the file.
Every attack runs on both backends, and through sessions under PYSANDBOX_TEST_VIA_SESSION=1.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

import pysandbox
from pysandbox.backends import landlock
from tests.support import host_capability, need, python_in_sandbox

pytestmark = pytest.mark.requires("userns")

# argv: PATH, then the tries; prints {try: "ok" | errno name}. Each try opens PATH with
# its flags and, when it may write, writes "pwned".
REOPEN = r'''
import errno, json, os, sys
path = sys.argv[1]
FLAGS = {"write": os.O_WRONLY, "append": os.O_WRONLY | os.O_APPEND, "rdwr": os.O_RDWR,
         "truncate": os.O_WRONLY | os.O_TRUNC, "rdonly_trunc": os.O_RDONLY | os.O_TRUNC,
         "read": os.O_RDONLY | os.O_NONBLOCK}
out = {}
for name in sys.argv[2:]:
    try:
        fd = os.open(path, FLAGS[name] | os.O_NONBLOCK)
        try:
            if FLAGS[name] & 3:
                os.write(fd, b"pwned")
        finally:
            os.close(fd)
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
print(json.dumps(out))
'''

ORIGINAL = b"original contents\n"
ATTACKS = ("write", "append", "rdwr", "truncate", "rdonly_trunc")
CONTROLS = ("no_landlock", "may_mount")


def _need_landlock():
    why = host_capability("landlock")
    if why is not None:
        need("landlock", why)


def _attacks() -> tuple:
    # O_RDONLY|O_TRUNC needs Landlock's TRUNCATE right (ABI 3) to be refused
    return ATTACKS if landlock.kernel_abi() >= 3 else tuple(a for a in ATTACKS if a != "rdonly_trunc")


def _policy(tmp_path, **kw):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return pysandbox.Policy.default(workdir=str(work), **kw)


def _reopen(backend, policy, path, tries, **kw) -> dict:
    done = pysandbox.run([python_in_sandbox(), "-c", REOPEN, path, *tries], policy=policy, backend=backend,
                         capture_output=True, timeout=120, **kw)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _victim(tmp_path, name="victim.txt"):
    outside = tmp_path / "outside"          # outside every writable mount of the policy
    outside.mkdir(exist_ok=True)
    victim = outside / name
    victim.write_bytes(ORIGINAL)
    return victim


def _control(monkeypatch, control, tmp_path) -> pysandbox.Policy:
    """The policy (and environment) under which the same attack must succeed."""
    if control == "no_landlock":
        monkeypatch.setenv(landlock.NO_LANDLOCK_ENV, "1")
        return _policy(tmp_path)
    return _policy(tmp_path, allow_nested_userns=True)


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("via", ["/proc/self/fd/0", "/dev/stdin"])
def test_readonly_stdin_is_not_reopened_for_writing(backend, tmp_path, monkeypatch, via, control):
    _need_landlock()
    victim = _victim(tmp_path)
    tries = _attacks()
    with open(victim, "rb") as stdin:
        got = _reopen(backend, _policy(tmp_path), via, tries, stdin=stdin)
    assert got == {t: "EACCES" for t in tries}
    assert victim.read_bytes() == ORIGINAL
    # live control: the same attack, no filesystem domain: the caller's file is written
    policy = _control(monkeypatch, control, tmp_path)
    with open(victim, "rb") as stdin:
        got = _reopen(backend, policy, via, ("append",), stdin=stdin)
    assert got == {"append": "ok"}
    assert victim.read_bytes() == ORIGINAL + b"pwned"


@pytest.mark.parametrize("control", CONTROLS)
def test_readonly_pass_fd_is_not_reopened_for_writing(backend, tmp_path, monkeypatch, control):
    _need_landlock()
    victim = _victim(tmp_path)
    tries = _attacks()
    fd = os.open(victim, os.O_RDONLY)
    try:
        got = _reopen(backend, _policy(tmp_path), f"/proc/self/fd/{fd}", tries + ("read",), pass_fds=(fd,))
        assert got == {**{t: "EACCES" for t in tries}, "read": "ok"}
        assert victim.read_bytes() == ORIGINAL
        policy = _control(monkeypatch, control, tmp_path)
        got = _reopen(backend, policy, f"/proc/self/fd/{fd}", ("append",), pass_fds=(fd,))
    finally:
        os.close(fd)
    assert got == {"append": "ok"}
    assert victim.read_bytes() == ORIGINAL + b"pwned"


@pytest.fixture
def outside_tmp():
    """A directory of the test's own on the host, not under the sandbox's /tmp (a writable
    mount: a read-only bind nested in one takes its rules, THREAT_MODEL.md)."""
    path = tempfile.mkdtemp(prefix="psb-reopen-", dir="/var/tmp")
    try:
        yield pathlib.Path(path)
    finally:
        shutil.rmtree(path)


def test_fifo_on_a_readonly_bind_is_not_opened_for_writing(backend, tmp_path, monkeypatch, outside_tmp):
    _need_landlock()
    ro = outside_tmp / "ro"
    ro.mkdir()
    fifo = ro / "fifo"
    os.mkfifo(fifo)
    policy = _policy(tmp_path, ro=[str(ro)])
    # O_RDWR on a FIFO never blocks; reading stays allowed
    assert _reopen(backend, policy, str(fifo), ("rdwr", "write", "read")) == \
        {"rdwr": "EACCES", "write": "EACCES", "read": "ok"}
    # live control: without Landlock the read-only bind does not stop it
    monkeypatch.setenv(landlock.NO_LANDLOCK_ENV, "1")
    assert _reopen(backend, policy, str(fifo), ("rdwr",)) == {"rdwr": "ok"}


# Everything that must keep working, each printing its own line; and the attack, in the
# same domain, refused (the domain was there while these passed).
KEEPS = r'''
set -e
dirfd=$1
cat /dev/stdin
echo to-stdout > /dev/stdout
echo to-stderr > /dev/stderr
echo w > workdir-file && cat workdir-file
echo t > /tmp/t && cat /tmp/t
echo n > /dev/null && echo dev-null
echo sandboxed > /proc/self/comm && echo proc-self
mkdir -p /tmp/a /tmp/b d1 d2
echo m > /tmp/a/f && mv /tmp/a/f /tmp/b/f && cat /tmp/b/f
echo p > d1/f && mv d1/f d2/f && cat d2/f
"$2" -c 'import os, sys
fd = os.open("made-by-openat", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=int(sys.argv[1]))
os.write(fd, b"through the directory descriptor"); os.close(fd)' "$dirfd"
if (echo pwned >> /dev/stdin) 2>/dev/null; then echo reopened; else echo refused; fi
'''


def test_what_keeps_working(backend, tmp_path):
    _need_landlock()
    stdin_file = _victim(tmp_path, "stdin.txt")
    shared = tmp_path / "given-dir"    # outside every writable mount: only the descriptor grants it
    shared.mkdir()
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    dirfd = os.open(shared, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with open(stdin_file, "rb") as stdin, open(out, "ab") as stdout, open(err, "wb") as stderr:
            done = pysandbox.run(["sh", "-c", KEEPS, "sh", str(dirfd), python_in_sandbox()], policy=_policy(tmp_path),
                                 backend=backend, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=(dirfd,),
                                 timeout=120)
    finally:
        os.close(dirfd)
    assert done.returncode == 0, err.read_text()
    # "> /dev/stdout" truncates the file the lines before were written to
    assert out.read_text().split() == ["to-stdout", "w", "t", "dev-null", "proc-self", "m", "p", "refused"]
    assert "to-stderr" in err.read_text()
    assert (shared / "made-by-openat").read_bytes() == b"through the directory descriptor"
    assert stdin_file.read_bytes() == ORIGINAL
    assert (tmp_path / "work" / "d2" / "f").read_text() == "p\n"


def test_cat_dev_stdin_reads_a_readonly_file(backend, tmp_path):
    """``tool < file`` reading its stdin by name (reading is not handled)."""
    _need_landlock()
    stdin_file = _victim(tmp_path, "stdin.txt")
    with open(stdin_file, "rb") as stdin:
        done = pysandbox.run(["cat", "/dev/stdin"], policy=_policy(tmp_path), backend=backend, stdin=stdin,
                             stdout=subprocess.PIPE, timeout=120)
    assert done.returncode == 0 and done.stdout == ORIGINAL


def test_a_writable_mount_the_command_cannot_reach_takes_no_rule(backend, tmp_path):
    """A writable bind below a tmpfs of mode 0 (the command, without capabilities, may
    not search it): its destination cannot be opened for a rule, and needs none (the
    command cannot write there anyway); the launch goes on (it failed with EACCES at the
    Landlock step while the rule was required). The domain is there all the same: a
    read-only stdin is still not reopened for writing."""
    _need_landlock()
    src = tmp_path / "src"
    src.mkdir()
    policy = _policy(tmp_path)
    policy = policy.replace(fs=policy.fs + (pysandbox.Tmpfs("/tmp/closed", mode=0o000),
                                            pysandbox.Bind(str(src), "/tmp/closed/rw")))
    victim = _victim(tmp_path)
    with open(victim, "rb") as stdin:
        assert _reopen(backend, policy, "/dev/stdin", ("append",), stdin=stdin) == {"append": "EACCES"}
    assert victim.read_bytes() == ORIGINAL


def test_devices_stay_writable_under_a_readonly_remounted_dev(backend, tmp_path):
    """``--dev /dev --remount-ro /dev``: the remount is not recursive, so /dev/null (a node
    bound on its own) stays writable, and so does the terminal's devpts; the rule goes on
    each of /dev's own mounts instead of /dev (landlock.writable_destinations). Live
    control: the domain is there (a read-only stdin is not reopened), and /dev itself is
    read-only (no new file)."""
    _need_landlock()
    policy = _policy(tmp_path)
    policy = policy.replace(fs=policy.fs + (pysandbox.RemountRo("/dev"),))
    victim = _victim(tmp_path)
    script = ("echo x > /dev/null && echo null-ok; (echo x > /dev/new) 2>/dev/null || echo dev-readonly; "
              "(echo pwned >> /dev/stdin) 2>/dev/null || echo refused")
    with open(victim, "rb") as stdin:
        done = pysandbox.run(["sh", "-c", script], policy=policy, backend=backend, stdin=stdin,
                             capture_output=True, timeout=120)
    assert (done.returncode, done.stdout.split()) == (0, [b"null-ok", b"dev-readonly", b"refused"]), done.stderr
    assert victim.read_bytes() == ORIGINAL


def _shape(tmp_path, shape) -> pysandbox.Policy:
    if shape == "as_pid_1":
        return _policy(tmp_path, as_pid_1=True)
    # no pid namespace (bwrap without --unshare-pid): the host's procfs, through a
    # read-only bind of "/", still offers the magic links
    return pysandbox.Policy(fs=(pysandbox.Bind("/", "/", readonly=True),), namespaces={"user"})


@pytest.mark.parametrize("shape", ["as_pid_1", "no_pid_namespace"])
def test_no_init_plans_refuse_the_reopen_too(backend, tmp_path, monkeypatch, shape):
    # Plans without our init (the command is pid 1, or there is no pid namespace) took no
    # Landlock domain at all: the domain was made right after the init only, so these
    # shapes still let a read-only stdin be rewritten (found after the fix above, as root
    # on both backends). They now take the filesystem domain alone (landlock.fs_kind).
    _need_landlock()
    victim = _victim(tmp_path)
    tries = _attacks()
    policy = _shape(tmp_path, shape)
    with open(victim, "rb") as stdin:
        got = _reopen(backend, policy, "/proc/self/fd/0", tries, stdin=stdin)
    assert got == {t: "EACCES" for t in tries}
    assert victim.read_bytes() == ORIGINAL
    # live control: without Landlock the same shape rewrites the caller's file
    monkeypatch.setenv(landlock.NO_LANDLOCK_ENV, "1")
    with open(victim, "rb") as stdin:
        got = _reopen(backend, policy, "/proc/self/fd/0", ("append",), stdin=stdin)
    assert got == {"append": "ok"}
    assert victim.read_bytes() == ORIGINAL + b"pwned"
