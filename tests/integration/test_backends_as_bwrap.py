"""Native and bwrap give the same sandbox, checked from inside on both backends
(the ``backend`` fixture) against what bubblewrap 0.8 itself does. Each test names
the bwrap behaviour it pins; tests/differential compares whole sandboxes."""

from __future__ import annotations

import os
import subprocess

import pytest

import pysandbox
from pysandbox import policy as PP

pytestmark = pytest.mark.requires("userns")


def run(backend, script, policy=None, env=None):
    done = pysandbox.run(["sh", "-c", script], policy=policy or PP.Policy.default(), backend=backend,
                         capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, (backend, done.returncode, done.stderr)
    return done.stdout


def status(text):
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


# ---------------------------------------------------------------- session (bwrap: setsid in pid 1)

@pytest.mark.parametrize("no_exec_init", ["0", "1"])
def test_new_session_is_the_inits(backend, no_exec_init, monkeypatch):
    monkeypatch.setenv("PYSANDBOX_NATIVE_NO_EXEC_INIT", no_exec_init)
    st = status(run(backend, "exec cat /proc/self/status"))
    # bwrap calls setsid() in its pid 1 before forking the command: session 1, and
    # the command (a child of pid 1) is not the session leader.
    assert st["NSsid"].strip() == "1" and st["NSpgid"].strip() == "1"
    assert st["NSpid"].split()[-1] != "1"


def test_new_session_as_pid_1_is_the_commands(backend):
    st = status(run(backend, "exec cat /proc/self/status", PP.Policy.default(as_pid_1=True)))
    assert st["NSpid"].split()[-1] == "1" and st["NSsid"].strip() == "1"


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo and len(out) < 64:            # bounded: a sandbox here has a handful
        for tid in os.listdir(f"/proc/{todo[0]}/task"):
            with open(f"/proc/{todo[0]}/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
            out += kids
            todo += kids
        todo.pop(0)
    return out


@pytest.mark.parametrize("new_session", [False, True])
def test_shared_session_is_the_callers(backend, new_session):
    # Seen from the host: without new_session every process of the sandbox is in
    # the caller's session; with it the command is not (the control). The caller's
    # own session id may be 0 (a leader outside this pid namespace, as under some
    # CI runners), so the check compares host-side session ids, not "0" inside.
    proc = pysandbox.Popen(["sh", "-c", "echo ready; read x"], backend=backend,
                           policy=PP.Policy.default(new_session=new_session),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        tree = [proc.pid] + _descendants(proc.pid)
        sessions = {pid: os.getsid(pid) for pid in tree}
    finally:
        proc.communicate("\n", timeout=30)
    assert proc.returncode == 0
    assert len(tree) >= 2, tree          # the launcher's child and the command at least
    command_sid = sessions[tree[-1]]
    if new_session:
        assert command_sid != os.getsid(0), sessions
    else:
        assert set(sessions.values()) == {os.getsid(0)}, sessions


# ---------------------------------------------------------------- id maps (bwrap's ns_uid)

def _bwrap_maps(dev, disable, uid, gid):
    """uid_map/gid_map as bwrap 0.8 shows them inside (checked against /usr/bin/bwrap
    with --dev, --disable-userns, --uid/--gid, as root and as an unprivileged user):
    setup runs as root of the new user namespace when it mounts a /dev (devpts),
    else as the sandbox's ids; a nested namespace maps the sandbox's ids onto the
    setup's when they differ or nested namespaces are disabled."""
    out = []
    for inside, outer in ((uid, os.geteuid()), (gid, os.getegid())):
        setup = 0 if dev else inside
        nested = disable or setup != inside
        out.append(f"{inside} {setup if nested else outer} 1")
    return out


@pytest.mark.parametrize("dev", [True, False])
@pytest.mark.parametrize("nested_ok", [False, True])
@pytest.mark.parametrize("ids", [(None, None), (1234, 2345)])
def test_id_maps_as_bwrap(backend, dev, nested_ok, ids):
    fs = (PP.Bind("/", "/", readonly=True),) + ((PP.Dev("/dev"),) if dev else ())
    pol = PP.Policy(fs=fs, uid=ids[0], gid=ids[1], allow_nested_userns=nested_ok)
    out = run(backend, "cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g", pol)
    lines = [" ".join(line.split()) for line in out.splitlines()]
    uid = os.geteuid() if ids[0] is None else ids[0]
    gid = os.getegid() if ids[1] is None else ids[1]
    assert lines[:2] == _bwrap_maps(dev, not nested_ok, uid, gid), (backend, lines)
    assert lines[2:] == [str(uid), str(gid)]


# ---------------------------------------------------------------- /proc covering (access W_OK)

PROC_MOUNTS = "awk '$5 ~ /^\\/proc\\// {print $5, $6}' /proc/self/mountinfo"


def _bwrap_itself(args, script):
    """The reference: /usr/bin/bwrap run directly (not through the bwrap backend)."""
    import subprocess
    from tests.support import need
    if not os.path.exists("/usr/bin/bwrap"):
        need("bwrap", "/usr/bin/bwrap is not installed")
    done = subprocess.run(["/usr/bin/bwrap", "--unshare-user", "--unshare-pid", *args, "sh", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("dev", [True, False])
@pytest.mark.parametrize("uid", [None, 1234])
def test_proc_covering_always(backend, dev, uid):
    """Stricter than bwrap (THREAT_MODEL.md, procfs row): every host-global entry of plan.PROC_READONLY
    that this kernel has is covered read-only, whatever the ids; bwrap itself covers
    only where access(W_OK) succeeds in its setup (never /proc/sys for a root caller)."""
    from pysandbox.plan import PROC_READONLY
    fs = (PP.Bind("/", "/", readonly=True),) + ((PP.Dev("/dev"),) if dev else ()) + (PP.Proc("/proc"),)
    pol = PP.Policy(fs=fs, uid=uid)
    got = run(backend, PROC_MOUNTS, pol)
    covered = {line.split()[0] for line in got.splitlines()}
    assert covered == {f"/proc/{e}" for e in PROC_READONLY if os.path.lexists(f"/proc/{e}")}, (backend, got)
    assert all(line.split()[1].startswith("ro,") for line in got.splitlines()), got
    ref = _bwrap_itself(["--ro-bind", "/", "/", *(["--dev", "/dev"] if dev else []), "--proc", "/proc",
                         *(["--uid", str(uid)] if uid is not None else [])], PROC_MOUNTS)
    bwrap_covered = {line.split()[0] for line in ref.splitlines()}
    assert bwrap_covered <= covered, (bwrap_covered, covered)
    if os.geteuid() == 0 and dev:
        # Why: bwrap's own rule leaves /proc/sys writable to a root caller (its 0555
        # directory fails access(W_OK) while kuid 0 may write the files below it).
        assert "/proc/sys" not in bwrap_covered, ref


# ---------------------------------------------------------------- default modes (umask 0 in setup)

MODES = ('cd /; for t in d1 d2 d3 f1 f2 b1 b2 b3 fb db s pp dd mq t1 t2 ex; do '
         'echo $t $(stat -c %a /$t /$t/p /$t/p/q); done; stat -c %a /; umask')
USR = (("--ro-bind", "/usr", "/usr"), ("--symlink", "usr/bin", "/bin"), ("--symlink", "usr/lib", "/lib"),
       ("--symlink", "usr/lib64", "/lib64"))


def _mode_policy(fds):
    P = PP
    usr = (P.Bind("/usr", "/usr", readonly=True), P.Symlink("usr/bin", "/bin"), P.Symlink("usr/lib", "/lib"),
           P.Symlink("usr/lib64", "/lib64"))
    fs = (P.Tmpfs("/"),) + usr + (
        P.Dir("/d1/p/q"), P.Dir("/d2/p/q", mode=0o700), P.Dir("/d3/p/q", mode=0o750),
        P.File("/f1/p/q", fd=fds[0]), P.File("/f2/p/q", fd=fds[1], mode=0o640),
        P.File("/b1/p/q", fd=fds[2], bind=True), P.File("/b2/p/q", fd=fds[3], bind=True, mode=0o644),
        P.File("/b3/p/q", fd=fds[4], bind=True, readonly=True),
        P.Bind("/etc/hostname", "/fb/p/q"), P.Bind("/etc", "/db/p/q"), P.Symlink("x", "/s/p/q"),
        P.Proc("/pp/p/q"), P.Dev("/dd/p/q"), P.Mqueue("/mq/p/q"), P.Tmpfs("/t1/p/q"), P.Tmpfs("/t2/p/q", mode=0o700),
        # existing paths keep their modes (bwrap: no chmod of an existing dir or file)
        P.Dir("/ex/p/q", mode=0o750), P.Dir("/ex/p/q", mode=0o700), P.File("/ex/p/q/f", fd=fds[5], mode=0o640),
        P.File("/ex/p/q/f", fd=fds[6], mode=0o600))
    # bwrap's own `--bind /etc` beside it: a writable system tree, on purpose
    return PP.Policy(fs=fs, namespaces={"user", "pid", "ipc"}, pass_fds=tuple(fds), allow_broad_writable=True)


def _mode_bwrap_args(fds):
    args = ["--tmpfs", "/"] + [a for t in USR for a in t] + [
        "--dir", "/d1/p/q", "--perms", "0700", "--dir", "/d2/p/q", "--perms", "0750", "--dir", "/d3/p/q",
        "--file", str(fds[0]), "/f1/p/q", "--perms", "0640", "--file", str(fds[1]), "/f2/p/q",
        "--bind-data", str(fds[2]), "/b1/p/q", "--perms", "0644", "--bind-data", str(fds[3]), "/b2/p/q",
        "--ro-bind-data", str(fds[4]), "/b3/p/q",
        "--bind", "/etc/hostname", "/fb/p/q", "--bind", "/etc", "/db/p/q", "--symlink", "x", "/s/p/q",
        "--proc", "/pp/p/q", "--dev", "/dd/p/q", "--mqueue", "/mq/p/q", "--tmpfs", "/t1/p/q",
        "--perms", "0700", "--tmpfs", "/t2/p/q",
        "--perms", "0750", "--dir", "/ex/p/q", "--perms", "0700", "--dir", "/ex/p/q",
        "--perms", "0640", "--file", str(fds[5]), "/ex/p/q/f", "--perms", "0600", "--file", str(fds[6]), "/ex/p/q/f"]
    return ["--unshare-ipc"] + args


def test_default_and_parent_modes_as_bwrap(backend):
    import subprocess
    fds = [os.open("/etc/hostname", os.O_RDONLY) for _ in range(7)]
    try:
        done = pysandbox.run(["/usr/bin/sh", "-c", MODES + "; stat -c %a /ex/p/q/f"], policy=_mode_policy(fds[:7]),
                             backend=backend, capture_output=True, text=True, timeout=60, pass_fds=fds)
        assert done.returncode == 0, done.stderr
    finally:
        for fd in fds:
            os.close(fd)
    fds = [os.open("/etc/hostname", os.O_RDONLY) for _ in range(7)]
    try:
        ref = subprocess.run(["/usr/bin/bwrap", "--unshare-user", "--unshare-pid", *_mode_bwrap_args(fds),
                              "/usr/bin/sh", "-c", MODES + "; stat -c %a /ex/p/q/f"],
                             capture_output=True, text=True, timeout=60, pass_fds=fds)
        assert ref.returncode == 0, ref.stderr
    finally:
        for fd in fds:
            os.close(fd)
    assert done.stdout == ref.stdout, (backend, done.stdout, ref.stdout)
    got = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    # live controls on the values themselves (bwrap 0.8 as measured): a mode-less file
    # is 0666 whatever the umask, bind-data 0600 under 0700 parents, binds' parents 0700
    assert got["f1"] == "755 755 666" and got["b1"] == "700 700 600" and got["fb"].startswith("700 700")
    assert got["ex"] == "750 750 750" and done.stdout.splitlines()[-1] == "640"


# ---------------------------------------------------------------- --bind-fd (D5)

@pytest.mark.parametrize("flags", ["path", "plain"])
def test_bind_of_a_directory_descriptor(backend, tmp_path, flags):
    src = tmp_path / "src"
    src.mkdir()
    (src / "mark").write_text("by-fd\n")
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY | (os.O_PATH if flags == "path" else 0))
    try:
        base = PP.Policy.default()
        pol = base.replace(fs=base.fs + (PP.Tmpfs("/mnt"), PP.Bind(None, "/mnt/byfd", src_fd=fd)))
        out = pysandbox.run(["sh", "-c", "cat /mnt/byfd/mark; touch /mnt/byfd/new && echo wrote"], policy=pol,
                            backend=backend, capture_output=True, text=True, timeout=60, pass_fds=(fd,))
    finally:
        os.close(fd)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["by-fd", "wrote"] and (src / "new").exists()


# ---------------------------------------------------------------- PWD (D1)

@pytest.mark.parametrize("chdir", [None, "/usr"])
def test_pwd_is_the_working_directory(backend, chdir):
    env = {k: v for k, v in os.environ.items() if k != "PWD"}
    env["PWD"] = "/nowhere"   # bwrap overwrites whatever the caller had
    out = run(backend, 'echo "$PWD"; pwd', PP.Policy.default(chdir=chdir), env=env)
    assert out.split() == [chdir or "/", chdir or "/"]


# ---------------------------------------------------------------- setup tmpfs options (D8)

SUPEROPTS = r"sed -n 's,^[^ ]* [^ ]* [^ ]* [^ ]* \(/\|/data\) .* - \([^ ]*\) [^ ]* \([^ ]*\)$,\1 \2 \3,p' /proc/self/mountinfo"


def test_setup_tmpfs_options_as_bwrap(backend):
    import subprocess
    r, w = os.pipe()
    os.write(w, b"x")
    os.close(w)
    try:
        usr = (PP.Bind("/usr", "/usr", readonly=True), PP.Symlink("usr/bin", "/bin"),
               PP.Symlink("usr/lib", "/lib"), PP.Symlink("usr/lib64", "/lib64"))
        pol = PP.Policy(fs=usr + (PP.Proc("/proc"), PP.File("/data", data=b"x", bind=True)))   # bare root
        got = pysandbox.run(["/usr/bin/sh", "-c", SUPEROPTS], policy=pol, backend=backend, capture_output=True,
                            text=True, timeout=60)
        ref = subprocess.run(["/usr/bin/bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/usr", "/usr",
                              "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                              "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--bind-data", str(r), "/data",
                              "/usr/bin/sh", "-c", SUPEROPTS], capture_output=True, text=True, timeout=60, pass_fds=(r,))
    finally:
        os.close(r)
    assert got.returncode == 0 and ref.returncode == 0, (got.stderr, ref.stderr)
    assert got.stdout == ref.stdout, (backend, got.stdout, ref.stdout)
    assert len(got.stdout.splitlines()) == 2 and "mode=" not in got.stdout   # control: both mounts listed
