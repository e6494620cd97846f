"""bwrap backend without running a sandbox: argv rendering, locating, setuid, options, message mapping."""

from __future__ import annotations

import os
import stat

import pytest

from pysandbox import plan as P
from pysandbox import probe
from pysandbox.backends.bwrap import bwrap_init as I
from pysandbox.backends.bwrap import bwrap_render as B
from pysandbox.backends.bwrap import bwrap_tail as T
from pysandbox.backends.bwrap import BwrapBackend
from pysandbox.errors import (BackendUnavailable, BwrapNotFound, BwrapOptionUnsupported, Reason,
                              SetuidRejected, SetupError)
from pysandbox.backends.bwrap import probe as PB
from pysandbox.policy import Bind, Chmod, Dev, Dir, File, Mqueue, Policy, Proc, RemountRo, Symlink, Tmpfs

HELP_08 = """usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]

    --help                       Print this help
    --version                    Print version
    --args FD                    Parse NUL-separated args from FD
    --unshare-user               Create new user namespace
    --unshare-ipc                Create new ipc namespace
    --unshare-pid                Create new pid namespace
    --unshare-net                Create new network namespace
    --unshare-uts                Create new uts namespace
    --uid UID                    Custom uid
    --gid GID                    Custom gid
    --die-with-parent            Kills with SIGKILL
    --new-session                Create a new terminal session
    --cap-drop CAP               Drop cap
    --cap-add CAP                Add cap
    --as-pid-1                   Do not install a reaper process with PID=1
    --chdir DIR                  Change directory to DIR
    --ro-bind SRC DEST           Bind readonly
    --bind SRC DEST              Bind
    --dev DEST                   Mount new dev on DEST
    --proc DEST                  Mount new procfs on DEST
    --tmpfs DEST                 Mount new tmpfs on DEST
    --add-seccomp-fd FD          Load seccomp
"""


class Counter:
    def __init__(self):
        self.blobs = []

    def __call__(self, data):
        self.blobs.append(data)
        return 100 + len(self.blobs) - 1


def opts(policy, **kw):
    return B.render(P.compile(policy, outer_ids=(1000, 1001)), Counter(), **kw)


def test_default_policy_argv(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    data = Counter()
    plan = P.compile(Policy.default(workdir=str(wd), keep_authority_sockets=True), outer_ids=(1000, 1001))
    argv = B.flatten(B.render(plan, data))
    for must in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                 "--die-with-parent", "--new-session", "--disable-userns"):
        assert must in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    # our init runs as pid 1 with what its setup needs, and drops it (init_command's -c)
    assert "--as-pid-1" in argv
    assert sorted(argv[i + 1] for i, w in enumerate(argv) if w == "--cap-add") == ["CAP_SETPCAP", "CAP_SYS_ADMIN"]
    assert argv[argv.index("--uid") + 1] == "1000" and argv[argv.index("--gid") + 1] == "1001"
    assert argv[argv.index("--chdir") + 1] == str(wd)
    # mounts in policy order
    i_root = argv.index("--ro-bind")
    assert argv[i_root:i_root + 3] == ["--ro-bind", "/", "/"]
    order = [argv.index(x) for x in ("--ro-bind", "--dev", "--proc", "--tmpfs", "--bind")]
    assert order == sorted(order)
    assert argv[argv.index("--bind") + 1:argv.index("--bind") + 3] == [str(wd), str(wd)]
    # the seccomp programs go to the init (installed in the command only): its op array
    assert "--add-seccomp-fd" not in argv
    progs = [op.program for op in plan.ops if isinstance(op, P.Seccomp)]
    ops = T.tail_ops(plan, [("/", 1, 2)])
    assert [bytes(op.a) for op in ops if op.kind == "SECCOMP"] == [bytes(p) for p in progs]
    assert next(op for op in ops if op.kind == "CAPS").n == 0
    assert [(op.b, op.n, op.m) for op in ops if op.kind == "BIND_CHECK"] == [("/", 1, 2)]
    assert {op.b for op in ops if op.kind == "RO_COVER"} == {"/proc/" + n for n in P.PROC_READONLY}
    cmd = I.init_command(plan, 50, 51, 52, "/bin/true", ["true", "x"])
    assert cmd == ["/proc/self/fd/50", "51", "50", "52", "--", "/bin/true", "true", "x"]


def test_init_modes_and_no_init_render(tmp_path):
    """as_pid_1: our init in exec mode (no INIT op; the command stays pid 1); no procfs in the
    sandbox and no pid namespace: no init, bwrap loads the seccomp programs and keeps
    no capability; a pid namespace without a procfs fails closed."""
    data = Counter()
    plan = P.compile(Policy.default(as_pid_1=True, keep_authority_sockets=True), outer_ids=(1000, 1001))
    argv = B.flatten(B.render(plan, data))
    assert B.init_mode(plan) == "exec" and "--as-pid-1" in argv and "--add-seccomp-fd" not in argv
    assert "INIT" not in [op.kind for op in T.tail_ops(plan, [])]   # exec mode: no fork
    plan = P.compile(Policy(fs=(Tmpfs("/"),), namespaces={"user"}), outer_ids=(1000, 1001))
    assert B.init_mode(plan) is None
    argv = B.flatten(B.render(plan, data))
    assert "--cap-add" not in argv and "--as-pid-1" not in argv
    progs = [op.program for op in plan.ops if isinstance(op, P.Seccomp)]
    fds = [argv[i + 1] for i, w in enumerate(argv) if w == "--add-seccomp-fd"]
    assert [data.blobs[int(fd) - 100] for fd in fds] == progs
    plan = P.compile(Policy(fs=(Tmpfs("/"),), namespaces={"user", "pid"}), outer_ids=(1000, 1001))
    assert B.init_mode(plan) == "fork"
    with pytest.raises(BackendUnavailable) as exc:
        I.init_command(plan, 50, 51, 52, "/bin/true", ["true"])
    assert exc.value.reason == Reason.BWRAP_INIT_UNAVAILABLE


def test_bind_identities_refuse_a_symlink_swapped_in(tmp_path):
    real, other = tmp_path / "real", tmp_path / "other"
    real.mkdir()
    other.mkdir()
    plan = P.compile(Policy(fs=(Bind(str(real), "/x"),)), outer_ids=(1000, 1001))
    st = os.stat(real)
    assert I.bind_identities(plan) == [("/x", st.st_dev, st.st_ino)]
    real.rmdir()
    real.symlink_to(other)
    with pytest.raises(SetupError) as exc:
        I.bind_identities(plan)
    assert exc.value.reason == Reason.SYMLINK_IN_PATH


def test_network_part_toggle():
    assert "--unshare-net" in B.flatten(opts(Policy.default(network="deny")))
    assert "--unshare-net" not in B.flatten(opts(Policy.default(network="deny"), network=False))
    assert "--unshare-net" not in B.flatten(opts(Policy.default(network="allow")))


def test_mount_ops_render_in_order(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    fs = (Tmpfs("/", size=1 << 20, mode=0o755), Dir("/d", mode=0o700), Symlink("d", "/l"),
          File("/d/f", data=b"abc", mode=0o640), File("/d/g", data=b"x", bind=True),
          File("/d/h", data=b"y", bind=True, readonly=True), File("/d/i", fd=7),
          Bind(str(src), "/s"), Bind(str(src), "/r", readonly=True), Bind(str(src), "/v", dev=True),
          Bind(str(tmp_path / "absent"), "/o", optional=True), Bind(str(src), "/t", readonly=True, optional=True),
          Bind(None, "/fd", src_fd=9, readonly=True), Bind(None, "/fdw", src_fd=10),
          RemountRo("/s"), Chmod("/d", 0o711), Proc("/proc"), Dev("/dev"), Mqueue("/dev/mqueue"),
          Tmpfs("/hidden", mode=0, ), )
    data = Counter()
    plan = P.compile(Policy(fs=fs), outer_ids=(0, 0))
    got = [o for o in B.render(plan, data) if o[0] not in (
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--uid", "--gid",
        "--die-with-parent", "--disable-userns", "--cap-drop", "--new-session", "--chdir", "--add-seccomp-fd",
        "--as-pid-1", "--cap-add")]
    assert got == [
        ("--perms", "0755"), ("--size", str(1 << 20)), ("--tmpfs", "/"),
        ("--perms", "0700"), ("--dir", "/d"),
        ("--symlink", "d", "/l"),
        ("--perms", "0640"), ("--file", "100", "/d/f"),
        ("--bind-data", "101", "/d/g"),
        ("--ro-bind-data", "102", "/d/h"),
        ("--file", "7", "/d/i"),
        ("--bind", str(src), "/s"), ("--ro-bind", str(src), "/r"), ("--dev-bind", str(src), "/v"),
        # the optional bind of a missing source was dropped at compile time
        ("--ro-bind-try", str(src), "/t"),
        ("--ro-bind-fd", "9", "/fd"), ("--bind-fd", "10", "/fdw"),
        ("--remount-ro", "/s"), ("--chmod", "0711", "/d"), ("--proc", "/proc"), ("--dev", "/dev"),
        ("--mqueue", "/dev/mqueue"),
        ("--perms", "0000"), ("--tmpfs", "/hidden"),
    ]
    assert data.blobs[:3] == [b"abc", b"x", b"y"]
    assert B.caller_fds(plan) == {7, 9, 10}


def test_hide_renders_readonly_empty_nodes(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("secret")
    from pysandbox.policy import Hide
    fs = (Bind("/", "/", readonly=True), Hide(str(tmp_path / "d")), Hide(str(tmp_path / "f")))
    data = Counter()
    argv = B.flatten(B.render(P.compile(Policy(fs=fs)), data))
    d, f = str(tmp_path / "d"), str(tmp_path / "f")
    i = argv.index(d)
    assert argv[i - 3:i + 3] == ["--perms", "0000", "--tmpfs", d, "--remount-ro", d]
    j = argv.index(f)
    assert argv[j - 4:j + 1] == ["--perms", "0000", "--ro-bind-data", argv[j - 1], f]
    assert data.blobs[int(argv[j - 1]) - 100] == b""


def test_probe_rendering_never_reads_caller_descriptors():
    plan = P.compile(Policy(fs=(Tmpfs("/"), File("/f", fd=7))))
    data = Counter()
    rendered = B.render(plan, data, probe=True)
    assert ("--file", "100", "/f") in rendered and data.blobs[0] == b""


def test_caps_hostname_pid1_argv0():
    o = opts(Policy(caps_keep=("net_raw", "CAP_CHOWN"), hostname="box", as_pid_1=True, argv0="zz",
                    allow_nested_userns=True, new_session=False, die_with_parent=False))
    assert ("--cap-add", "CAP_CHOWN") in o and ("--cap-add", "CAP_NET_RAW") in o
    assert o.index(("--cap-drop", "ALL")) < o.index(("--cap-add", "CAP_CHOWN"))
    assert ("--hostname", "box") in o and ("--as-pid-1",) in o and ("--argv0", "zz") in o
    assert ("--disable-userns",) not in o and ("--new-session",) not in o
    assert ("--die-with-parent",) in o   # always, whatever the policy says


@pytest.mark.parametrize("message, network_part, reason", [
    ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
     "non-privileged user namespaces.", False, Reason.USER_NAMESPACE_UNAVAILABLE),
    ("bwrap: setting up uid map: Permission denied", False, Reason.USER_NAMESPACE_UNAVAILABLE),
    ("bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)",
     True, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
    ("bwrap: No permissions to creating new namespace", True, Reason.NETWORK_NAMESPACE_UNAVAILABLE),
    ("bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted", True, Reason.LOOPBACK_SETUP_FAILED),
    ("bwrap: Can't mount proc on /newroot/proc: Operation not permitted", False, Reason.PROC_MOUNT_FAILED),
    ("bwrap: Unknown option --frobnicate", False, Reason.BWRAP_OPTION_UNSUPPORTED),
    ("bwrap: Can't find source path /nope: No such file or directory", False, Reason.BIND_SOURCE_MISSING),
    ("bwrap: Can't chdir to /nope: No such file or directory", False, Reason.BWRAP_PROBE_FAILED),
])
def test_classify(message, network_part, reason):
    assert PB.classify(message, network_part=network_part) == reason


def test_probe_failed_tells_setup_from_exec():
    ok = probe.ProbeResult(0, "", "")
    exec_failed = probe.ProbeResult(1, "", "bwrap: execvp true: No such file or directory\n")
    cmd_failed = probe.ProbeResult(3, "", "some output of the command\n")
    setup = probe.ProbeResult(1, "", "bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
    killed = probe.ProbeResult(-9, "", "")
    assert PB.probe_failed(ok) is None
    assert PB.probe_failed(exec_failed) is None
    assert PB.probe_failed(cmd_failed) is None
    assert PB.probe_failed(setup) == "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
    assert PB.probe_failed(killed)


# ---------------------------------------------------------------- locating

def fake_bwrap(path, help_text=HELP_08, version="bubblewrap 0.8.0"):
    path.write_text("#!/bin/sh\n"
                    f"if [ \"$1\" = --help ]; then cat <<'EOF'\n{help_text}EOF\nexit 0; fi\n"
                    f"if [ \"$1\" = --version ]; then echo '{version}'; exit 0; fi\n"
                    "exit 1\n")
    path.chmod(0o755)
    return path


def test_locate_order(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    a = fake_bwrap(tmp_path / "a" / "bwrap")
    (tmp_path / "bin").mkdir()
    on_path = fake_bwrap(tmp_path / "bin" / "bwrap")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("PYSANDBOX_BWRAP", raising=False)
    assert probe.locate_bwrap() == str(on_path)
    monkeypatch.setenv("PYSANDBOX_BWRAP", str(a))
    assert probe.locate_bwrap() == str(a)
    assert probe.locate_bwrap(str(on_path)) == str(on_path)   # explicit beats the environment


def test_locate_resolves_symlinks(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    real = fake_bwrap(tmp_path / "real" / "bwrap-0.8")
    (tmp_path / "bin").mkdir()
    os.symlink(real, tmp_path / "bin" / "bwrap")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("PYSANDBOX_BWRAP", raising=False)
    assert probe.locate_bwrap() == str(real)


def test_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PYSANDBOX_BWRAP", raising=False)
    monkeypatch.setattr(probe, "bundled_bwrap", lambda: None)   # no pysandbox[bwrap] either
    with pytest.raises(BwrapNotFound) as info:
        probe.locate_bwrap()
    assert info.value.reason == Reason.BWRAP_NOT_FOUND
    monkeypatch.setenv("PYSANDBOX_BWRAP", str(tmp_path / "nowhere"))
    with pytest.raises(BwrapNotFound) as info:
        probe.locate_bwrap()
    assert info.value.reason == Reason.BWRAP_NOT_FOUND
    (tmp_path / "notexec").write_text("")
    with pytest.raises(BwrapNotFound):
        probe.locate_bwrap(str(tmp_path / "notexec"))


def test_never_inside_a_writable_path(tmp_path, monkeypatch):
    (tmp_path / "rw").mkdir()
    (tmp_path / "ro").mkdir()
    inside = fake_bwrap(tmp_path / "rw" / "bwrap")
    outside = fake_bwrap(tmp_path / "ro" / "bwrap")
    monkeypatch.delenv("PYSANDBOX_BWRAP", raising=False)
    with pytest.raises(BackendUnavailable) as info:
        probe.locate_bwrap(str(inside), writable=[str(tmp_path / "rw")])
    assert info.value.reason == Reason.BWRAP_IN_WRITABLE_PATH
    # a symlink outside pointing inside is refused too (resolved paths are compared)
    os.symlink(inside, tmp_path / "link")
    with pytest.raises(BackendUnavailable):
        probe.locate_bwrap(str(tmp_path / "link"), writable=[str(tmp_path / "rw")])
    # from PATH, the writable one is skipped and the next one used
    monkeypatch.setenv("PATH", f"{tmp_path / 'rw'}:{tmp_path / 'ro'}")
    assert probe.locate_bwrap(writable=[str(tmp_path / "rw")]) == str(outside)
    assert probe.locate_bwrap(writable=[]) == str(inside)
    # the backend derives the writable paths from the policy
    backend = BwrapBackend(str(inside))
    with pytest.raises(BackendUnavailable) as info:
        backend.info(P.writable_host_paths(Policy.default(workdir=str(tmp_path / "rw"))))
    assert info.value.reason == Reason.BWRAP_IN_WRITABLE_PATH


def test_setuid_rejected_unless_opted_in(tmp_path, monkeypatch):
    fake = fake_bwrap(tmp_path / "bwrap")
    fake.chmod(0o4755)
    assert os.stat(fake).st_mode & stat.S_ISUID
    monkeypatch.delenv("PYSANDBOX_ALLOW_SETUID_BWRAP", raising=False)
    with pytest.raises(SetuidRejected) as info:
        BwrapBackend(str(fake)).info()
    assert info.value.reason == Reason.BWRAP_SETUID_REJECTED
    assert BwrapBackend(str(fake), allow_setuid=True).info().setuid is True
    monkeypatch.setenv("PYSANDBOX_ALLOW_SETUID_BWRAP", "1")
    assert BwrapBackend(str(fake)).info().setuid is True
    fake.chmod(0o2755)   # setgid counts too
    monkeypatch.delenv("PYSANDBOX_ALLOW_SETUID_BWRAP")
    with pytest.raises(SetuidRejected):
        BwrapBackend(str(fake)).info()


def test_version_and_options_are_parsed_and_cached_per_file(tmp_path):
    fake = fake_bwrap(tmp_path / "bwrap")
    info = probe.bwrap_info(str(fake))
    assert info.version == "0.8.0"
    assert "--unshare-net" in info.options and "--argv0" not in info.options
    assert probe.bwrap_info(str(fake)) is info
    fake_bwrap(fake, HELP_08 + "    --argv0 VALUE                Set argv[0]\n", "bubblewrap 0.11.0")
    again = probe.bwrap_info(str(fake))   # size changed: probed again
    assert again.version == "0.11.0" and "--argv0" in again.options


def test_a_plan_needing_a_missing_option_is_refused(tmp_path):
    fake = fake_bwrap(tmp_path / "bwrap")   # its help lacks --disable-userns and --dev-bind
    backend = BwrapBackend(str(fake))
    with pytest.raises(BwrapOptionUnsupported) as info:
        backend.check(P.compile(Policy.default(network="allow")))
    assert info.value.reason == Reason.BWRAP_OPTION_UNSUPPORTED
    assert "--disable-userns" in str(info.value)


def test_a_hidden_path_that_vanished_is_not_rendered(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("secret")
    from pysandbox.policy import Hide
    fs = (Bind("/", "/", readonly=True), Hide(str(tmp_path / "d")), Hide(str(tmp_path / "f")))
    plan = P.compile(Policy(fs=fs))
    before = B.flatten(B.render(plan, Counter()))
    assert str(tmp_path / "d") in before and str(tmp_path / "f") in before
    (tmp_path / "f").unlink()
    (tmp_path / "d").rmdir()
    after = B.flatten(B.render(plan, Counter()))   # the same (cached) plan, the host changed
    assert str(tmp_path / "d") not in after and str(tmp_path / "f") not in after


def test_read_only_device_bind_and_reused_descriptor_are_refused(tmp_path):
    fake = fake_bwrap(tmp_path / "bwrap", HELP_08 + "    --dev-bind SRC DEST             Bind\n"
                                                     "    --file FD DEST                 Copy\n"
                                                     "    --disable-userns               Disable\n")
    backend = BwrapBackend(str(fake))
    (tmp_path / "src").mkdir()
    ro_dev = Policy(fs=(Tmpfs("/"), Bind(str(tmp_path / "src"), "/d", readonly=True, dev=True)))
    with pytest.raises(BwrapOptionUnsupported) as info:
        backend.check(P.compile(ro_dev))
    assert info.value.reason == Reason.BWRAP_OPTION_UNSUPPORTED
    from pysandbox.errors import PolicyError
    twice = Policy(fs=(Tmpfs("/"), File("/a", fd=5), File("/b", fd=5)))
    with pytest.raises(PolicyError) as info:
        backend.check(P.compile(twice))
    assert info.value.reason == Reason.CONFLICTING_OPTIONS
