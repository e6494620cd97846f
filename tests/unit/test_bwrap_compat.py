"""bwrap_compat's parser: every bubblewrap 0.11 option, its errors, and a round trip.

No kernel is touched: descriptors are read through a fake ``read_fd``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from bwrap_compat import parser as bp
from bwrap_compat.mapping import env_of, parent_mode, to_policy, with_bwrap_parents
from bwrap_compat.render import to_argv
from pysandbox import policy as P
from pysandbox.errors import BwrapArgumentError, Reason

BPF = bytes.fromhex("0600000000007fff")


def fake_fds(table):
    closed = []

    def read(fd):
        if fd not in table:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return table[fd]
    return read, closed.append, closed


def parse(argv, fds=None):
    read, close, _ = fake_fds(fds or {})
    return bp.parse(argv, read_fd=read, close_fd=close)


def error(argv, fds=None, uid=1000):
    with pytest.raises(BwrapArgumentError) as info:
        args = parse(argv, fds)
        bp.check(args, real_uid=uid, real_gid=uid, userns_try=True)
    assert info.value.reason is Reason.BWRAP_ARGUMENT_INVALID
    return info.value


# ---------------------------------------------------------------- every option parses

FS_CASES = [
    (["--bind", "/a", "/b"], bp.FsOp("--bind", "/b", src="/a")),
    (["--bind-try", "/a", "/b"], bp.FsOp("--bind-try", "/b", src="/a")),
    (["--ro-bind", "/a", "/b"], bp.FsOp("--ro-bind", "/b", src="/a")),
    (["--ro-bind-try", "/a", "/b"], bp.FsOp("--ro-bind-try", "/b", src="/a")),
    (["--dev-bind", "/a", "/b"], bp.FsOp("--dev-bind", "/b", src="/a")),
    (["--dev-bind-try", "/a", "/b"], bp.FsOp("--dev-bind-try", "/b", src="/a")),
    (["--bind-fd", "7", "/b"], bp.FsOp("--bind-fd", "/b", src="/proc/self/fd/7", fd=7)),
    (["--ro-bind-fd", "7", "/b"], bp.FsOp("--ro-bind-fd", "/b", src="/proc/self/fd/7", fd=7)),
    (["--remount-ro", "/b"], bp.FsOp("--remount-ro", "/b")),
    (["--proc", "/proc"], bp.FsOp("--proc", "/proc")),
    (["--dev", "/dev"], bp.FsOp("--dev", "/dev")),
    (["--mqueue", "/q"], bp.FsOp("--mqueue", "/q")),
    (["--tmpfs", "/t"], bp.FsOp("--tmpfs", "/t", perms=0o755)),
    (["--perms", "0700", "--size", "4096", "--tmpfs", "/t"], bp.FsOp("--tmpfs", "/t", perms=0o700, size=4096)),
    (["--size", "0x1000", "--perms", "1777", "--tmpfs", "/t"], bp.FsOp("--tmpfs", "/t", perms=0o1777, size=4096)),
    (["--dir", "/d"], bp.FsOp("--dir", "/d", perms=0o755)),
    (["--perms", "0711", "--dir", "/d"], bp.FsOp("--dir", "/d", perms=0o711)),
    (["--file", "5", "/f"], bp.FsOp("--file", "/f", fd=5, perms=0o666)),
    (["--bind-data", "5", "/f"], bp.FsOp("--bind-data", "/f", fd=5, perms=0o600)),
    (["--perms", "0444", "--ro-bind-data", "5", "/f"], bp.FsOp("--ro-bind-data", "/f", fd=5, perms=0o444)),
    (["--symlink", "target", "/l"], bp.FsOp("--symlink", "/l", src="target")),
    (["--chmod", "0700", "/c"], bp.FsOp("--chmod", "/c", perms=0o700)),
    (["--overlay-src", "/l1", "--overlay-src", "/l2", "--overlay", "/up", "/wk", "/o"],
     bp.FsOp("--overlay", "/o", src="/up", workdir="/wk", overlay_srcs=("/l1", "/l2"))),
    (["--overlay-src", "/l1", "--tmp-overlay", "/o"], bp.FsOp("--tmp-overlay", "/o", overlay_srcs=("/l1",))),
    (["--overlay-src", "/l1", "--overlay-src", "/l2", "--ro-overlay", "/o"],
     bp.FsOp("--ro-overlay", "/o", overlay_srcs=("/l1", "/l2"))),
]


@pytest.mark.parametrize("argv,op", FS_CASES, ids=[" ".join(a) for a, _ in FS_CASES])
def test_filesystem_option(argv, op):
    args = parse(argv + ["cmd"])
    assert args.ops == [op]
    assert args.command == ["cmd"]


FLAG_CASES = {
    "--unshare-user": "unshare_user", "--unshare-user-try": "unshare_user_try", "--unshare-ipc": "unshare_ipc",
    "--unshare-pid": "unshare_pid", "--unshare-net": "unshare_net", "--unshare-uts": "unshare_uts",
    "--unshare-cgroup": "unshare_cgroup", "--unshare-cgroup-try": "unshare_cgroup_try",
    "--disable-userns": "disable_userns", "--assert-userns-disabled": "assert_userns_disabled",
    "--new-session": "new_session", "--die-with-parent": "die_with_parent", "--as-pid-1": "as_pid_1",
    "--level-prefix": "level_prefix", "--not-a-security-boundary": "not_a_security_boundary",
}


@pytest.mark.parametrize("option", sorted(FLAG_CASES))
def test_flag_option(option):
    args = parse([option, "cmd"])
    assert getattr(args, FLAG_CASES[option]) is True
    assert getattr(parse(["cmd"]), FLAG_CASES[option]) is False


VALUE_CASES = [
    ("--uid", "5", "uid", 5), ("--gid", "+6", "gid", 6), ("--hostname", "h", "hostname", "h"),
    ("--chdir", "/x", "chdir", "/x"), ("--argv0", "zero", "argv0", "zero"),
    ("--sync-fd", "3", "sync_fd", 3), ("--block-fd", "4", "block_fd", 4),
    ("--userns-block-fd", "5", "userns_block_fd", 5), ("--info-fd", "6", "info_fd", 6),
    ("--json-status-fd", " 7", "json_status_fd", 7), ("--userns", "8", "userns_fd", 8),
    ("--userns2", "9", "userns2_fd", 9), ("--pidns", "10", "pidns_fd", 10), ("--seccomp", "11", "seccomp_fd", 11),
]


@pytest.mark.parametrize("option,text,attr,value", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_value_option(option, text, attr, value):
    assert getattr(parse([option, text, "cmd"]), attr) == value


@pytest.mark.parametrize("option", ["--uid", "--hostname", "--chdir", "--sync-fd", "--info-fd", "--seccomp",
                                    "--userns", "--pidns", "--json-status-fd", "--block-fd"])
def test_repeated_value_option_warns_and_last_wins(option):
    args = parse([option, "3", option, "4", "cmd"])
    assert args.warnings == [f"Only the last {option} option will take effect"]


def test_unshare_all_and_share_net():
    args = parse(["--unshare-all", "--share-net", "cmd"])
    assert (args.unshare_user_try, args.unshare_ipc, args.unshare_pid, args.unshare_uts,
            args.unshare_cgroup_try) == (True,) * 5
    assert not args.unshare_net and not args.unshare_user and not args.unshare_cgroup
    assert parse(["--share-net", "--unshare-all", "cmd"]).unshare_net


def test_environment_edits_keep_order():
    args = parse(["--setenv", "A", "1", "--clearenv", "--unsetenv", "B", "--setenv", "C", "3", "cmd"])
    assert args.env_ops == [("set", "A", "1"), ("clear",), ("unset", "B"), ("set", "C", "3")]
    env = env_of(args.env_ops)
    assert env.apply({"A": "0", "B": "2", "D": "4"}) == {"C": "3"}
    assert env_of([("set", "A", "1"), ("unset", "A")]).apply({"A": "x", "K": "k"}) == {"K": "k"}


def test_lock_files_and_labels_and_caps():
    args = parse(["--lock-file", "/a", "--lock-file", "/b", "--cap-add", "cap_sys_admin", "--cap-drop", "ALL",
                  "--cap-add", "12", "cmd"])
    assert args.lock_files == ["/a", "/b"]
    assert args.cap_ops == [("add", frozenset({21})), ("drop", bp.ALL_CAPS), ("add", frozenset({12}))]


def test_args_fd_is_read_closed_and_spliced_in_order():
    read, close, closed = fake_fds({9: b"--ro-bind\0/\0/\0--chdir\0/tmp\0"})
    args = bp.parse(["--unshare-net", "--args", "9", "--chdir", "/x", "cmd", "a"], read_fd=read, close_fd=close)
    assert closed == [9]
    assert args.ops == [bp.FsOp("--ro-bind", "/", src="/")]
    assert args.chdir == "/x" and args.warnings == ["Only the last --chdir option will take effect"]
    assert args.unshare_net and args.command == ["cmd", "a"]


def test_args_file_stops_at_its_first_non_option_as_bwrap():
    args = parse(["--args", "9", "--unshare-pid", "cmd"], {9: b"--unshare-ipc\0ignored\0--unshare-net\0"})
    assert args.unshare_ipc and args.unshare_pid and not args.unshare_net
    assert args.command == ["cmd"]


def test_add_seccomp_fd_reads_programs_in_order():
    args = parse(["--add-seccomp-fd", "5", "--add-seccomp-fd", "6", "cmd"], {5: BPF, 6: BPF * 2})
    assert args.seccomp_programs == [BPF, BPF * 2]


def test_dashdash_and_first_non_option_end_options():
    assert parse(["--unshare-net", "--", "--unshare-pid"]).command == ["--unshare-pid"]
    args = parse(["--unshare-net", "cmd", "--unshare-pid"])
    assert args.command == ["cmd", "--unshare-pid"] and not args.unshare_pid
    assert parse(["--", "--", "x"]).command == ["--", "x"]


def test_help_and_version_stop_parsing():
    assert parse(["--unshare-net", "--help", "--bogus"]).action == "help"
    assert parse(["--version"]).action == "version"
    assert parse(["--unshare-net", "--version", "--bogus"]).action == "version"
    error(["--bogus", "--help"])


def test_trailing_perms_is_ignored_then_usage_as_bwrap():
    assert error(["--perms", "0700"]).usage


# ---------------------------------------------------------------- errors, bwrap's wording

ERRORS = [
    ([], None),
    (["--unshare-user"], None),
    (["--bind", "/a"], "--bind takes two arguments"),
    (["--ro-bind-try", "/a"], "--ro-bind-try takes two arguments"),
    (["--bind-fd", "1"], "--bind-fd takes two arguments"),
    (["--ro-bind-fd", "x", "/b"], "Invalid fd: x"),
    (["--remount-ro"], "--remount-ro takes one argument"),
    (["--chdir"], "--chdir takes one argument"),
    (["--argv0"], "--argv0 takes one argument"),
    (["--argv0", "a", "--argv0", "b", "c"], "--argv0 used multiple times"),
    (["--proc"], "--proc takes an argument"),
    (["--tmpfs"], "--tmpfs takes an argument"),
    (["--file", "3"], "--file takes two arguments"),
    (["--file", "-1", "/f", "c"], "Invalid fd: -1"),
    (["--bind-data", "", "/f", "c"], "Invalid fd: "),
    (["--ro-bind-data", "3x", "/f", "c"], "Invalid fd: 3x"),
    (["--symlink", "a"], "--symlink takes two arguments"),
    (["--setenv", "A"], "--setenv takes two arguments"),
    (["--unsetenv"], "--unsetenv takes an argument"),
    (["--uid", "x", "c"], "Invalid uid: x"),
    (["--uid", "4294967295", "c"], "Invalid uid: 4294967295"),
    (["--gid", "-1", "c"], "Invalid gid: -1"),
    (["--hostname"], "--hostname takes an argument"),
    (["--foo", "c"], "Unknown option --foo"),
    (["-x", "c"], "Unknown option -x"),
    (["--perms", "8", "--dir", "/d", "c"], "--perms takes an octal argument <= 07777"),
    (["--perms", "10000", "--dir", "/d", "c"], "--perms takes an octal argument <= 07777"),
    (["--perms", "-1", "--dir", "/d", "c"], "--perms takes an octal argument <= 07777"),
    (["--perms", "0700", "--perms", "0700"], "--perms given twice for the same action"),
    (["--perms", "0700", "--bind", "/a", "/b", "c"], "--perms must be followed by an option that creates a file"),
    (["--perms", "0700", "--proc", "/p", "c"], "--perms must be followed by an option that creates a file"),
    (["--size", "0", "c"], "--size takes a non-zero number of bytes"),
    (["--size", "-1", "c"], "--size takes a non-zero number of bytes"),
    (["--size", " 1", "c"], "--size takes a non-zero number of bytes"),
    (["--size", "99999999999999999999999", "c"], "--size takes a non-zero number of bytes"),
    (["--size", "9223372036854775808", "c"], f"--size (for tmpfs) is limited to {bp.MAX_TMPFS_BYTES}"),
    (["--size", "1", "--size", "2"], "--size given twice for the same action"),
    (["--size", "10", "--dir", "/d", "c"], "--size must be followed by --tmpfs"),
    (["--chmod", "0700"], "--chmod takes two arguments"),
    (["--chmod", "9", "/x", "c"], "--chmod takes an octal argument <= 07777"),
    (["--exec-label", "l", "c"], "labeling not supported on this system"),
    (["--file-label", "l", "c"], "labeling not supported on this system"),
    (["--args"], "--args takes an argument"),
    (["--args", "x", "c"], "Invalid fd: x"),
    (["--args", "9", "c"], "Can't read --args data: Bad file descriptor"),
    (["--seccomp", "3", "--add-seccomp-fd", "4", "c"], "--add-seccomp-fd cannot be combined with --seccomp"),
    (["--add-seccomp-fd", "4", "--seccomp", "3", "c"], "--seccomp cannot be combined with --add-seccomp-fd"),
    (["--add-seccomp-fd", "5", "c"], "Invalid seccomp data, must be multiple of 8"),
    (["--add-seccomp-fd", "9", "c"], "Can't read seccomp data: Bad file descriptor"),
    (["--cap-add", "FOO", "c"], "unknown cap: FOO"),
    (["--cap-drop", "sys_admin", "c"], "unknown cap: sys_admin"),
    (["--cap-add", "64", "c"], "unknown cap: 64"),
    (["--cap-add"], "--cap-add takes an argument"),
    (["--overlay-src", "/l", "--dir", "/d", "c"], bp.OVERLAY_SRC_ORPHAN),
    (["--overlay-src"], bp.OVERLAY_SRC_ORPHAN),
    (["--overlay-src", "/l", "c"], bp.OVERLAY_SRC_ORPHAN),
    (["--overlay", "/a", "/b"], "--overlay takes three arguments"),
    (["--overlay", "/a", "/b", "/c", "x"], "--overlay requires at least one --overlay-src"),
    (["--tmp-overlay", "/o", "c"], "--tmp-overlay requires at least one --overlay-src"),
    (["--overlay-src", "/l", "--ro-overlay", "/o", "c"], "--ro-overlay requires at least two --overlay-src"),
    (["--userns-block-fd", "3", "c"], "--userns-block-fd requires --unshare-user"),
    (["--unshare-user", "--userns-block-fd", "3", "c"], "--userns-block-fd requires --info-fd"),
    (["--userns", "3", "--unshare-user", "c"], "--userns not compatible --unshare-user"),
    (["--userns", "3", "--unshare-user-try", "c"], "--userns not compatible --unshare-user-try"),
    (["--disable-userns", "c"], "--disable-userns requires --unshare-user"),
    (["--unshare-user", "--disable-userns", "--userns-block-fd", "3", "--info-fd", "4", "c"],
     "--disable-userns is not compatible with  --userns-block-fd"),
    (["--hostname", "h", "c"], "Specifying --hostname requires --unshare-uts"),
    (["--as-pid-1", "c"], "Specifying --as-pid-1 requires --unshare-pid"),
    (["--unshare-pid", "--as-pid-1", "--lock-file", "/l", "c"], "Specifying --as-pid-1 and --lock-file is not permitted"),
]


@pytest.mark.parametrize("argv,message", ERRORS, ids=[" ".join(a) or "<empty>" for a, _ in ERRORS])
def test_error(argv, message):
    err = error(argv, {4: BPF, 5: b"1234567"})
    if message is None:
        assert err.usage
    else:
        assert err.args[0] == message and not err.usage


def test_nested_args_refused():
    err = error(["--args", "9", "c"], {9: b"--args\x0010\x00"})
    assert err.args[0] == "--args not supported in arguments file"


def test_too_many_arguments():
    err = error(["--args", "9", "c"], {9: b"--unshare-pid\0" * 9001})
    assert err.args[0] == "Exceeded maximum number of arguments 9000"


def test_uid_rules_for_root_and_others():
    assert bp.check(parse(["--uid", "5", "c"]), real_uid=1000, real_gid=1000).unshare_user
    err = error(["--uid", "5", "c"], uid=0)
    assert err.args[0] == "Specifying --uid requires --unshare-user or --userns"
    root = bp.check(parse(["c"]), real_uid=0, real_gid=0, userns_try=True)
    assert not root.unshare_user and root.uid == 0
    assert bp.check(parse(["--unshare-user-try", "c"]), real_uid=0, real_gid=0, userns_try=True).unshare_user
    assert not bp.check(parse(["--unshare-user-try", "c"]), real_uid=0, real_gid=0, userns_try=False).unshare_user


def test_error_keeps_earlier_warnings():
    err = error(["--chdir", "/a", "--chdir", "/b", "--bogus"])
    assert err.warnings == ["Only the last --chdir option will take effect"]


def test_level_prefix_is_recorded_on_errors():
    assert error(["--level-prefix", "--bogus"]).level_prefix
    assert not error(["--bogus", "--level-prefix"]).level_prefix


def test_c_strtol_follows_c():
    assert bp.c_strtol("  +12x", 10) == (12, "x", False)
    assert bp.c_strtol("0x10", 0, unsigned=True)[0] == 16
    assert bp.c_strtol("010", 0, unsigned=True)[0] == 8
    assert bp.c_strtol("abc", 10) == (0, "abc", False)
    assert bp.c_strtol("99999999999999999999", 10)[2] is True
    assert bp.parse_int_arg("4294967296") == 0    # strtol then int: bwrap's truncation


def test_cap_names():
    assert bp.cap_from_name("CAP_NET_RAW") == 13 == bp.cap_from_name("cap_net_raw")
    assert bp.cap_from_name("63") == 63 and bp.cap_from_name("64") is None
    assert bp.cap_from_name("net_raw") is None


# ---------------------------------------------------------------- mapping to a Policy

def _policy(argv, fds=None, uid=1000, caps=frozenset()):
    read, close, _ = fake_fds(fds or {})
    args = bp.check(bp.parse(argv, read_fd=read, close_fd=close), real_uid=uid, real_gid=uid, userns_try=True)
    return to_policy(args, real_uid=uid, start_caps=caps, read_fd=read, cgroup_ns=True)


def test_policy_namespaces_network_and_process_flags():
    policy, compat = _policy(["--unshare-all", "--share-net", "--hostname", "h", "--new-session",
                              "--die-with-parent", "--as-pid-1", "c"])
    assert policy.namespaces == {"user", "pid", "ipc", "uts", "cgroup"}
    assert policy.network.mode == "allow" and policy.hostname == "h"
    assert policy.new_session and policy.die_with_parent and policy.as_pid_1
    assert compat.unshared == ("cgroup", "ipc", "mnt", "pid", "uts")
    bare, _ = _policy(["c"])
    assert bare.namespaces == {"user"} and bare.network.mode == "allow"
    assert not bare.new_session and not bare.die_with_parent and bare.allow_nested_userns
    assert _policy(["--unshare-net", "c"])[0].network.mode == "deny"


def test_policy_fs_ops_in_order(tmp_path):
    (tmp_path / "f").write_text("x")
    fs = _policy(["--tmpfs", "/t", "--perms", "0700", "--dir", "/t/d", "--file", "3", "/t/f",
                  "--ro-bind-data", "3", "/t/g", "--symlink", "x", "/t/l", "--chmod", "0711", "/t/d",
                  "--ro-bind", str(tmp_path), "/t/h", "--remount-ro", "/t", "--dev", "/dev",
                  "--mqueue", "/dev/mqueue", "--unshare-pid", "--proc", "/proc", "c"], {3: b"data"})[0].fs
    assert fs == (P.Tmpfs("/t", mode=0o755), P.Dir("/t/d", mode=0o700), P.File("/t/f", data=b"data", mode=0o666),
                  P.File("/t/g", data=b"data", mode=0o600, bind=True, readonly=True), P.Symlink("x", "/t/l"),
                  P.Chmod("/t/d", 0o711), P.Bind(str(tmp_path), "/t/h", readonly=True), P.RemountRo("/t"),
                  P.Dev("/dev"), P.Mqueue("/dev/mqueue"), P.Proc("/proc"))


def test_bind_sources_resolved_and_try_skipped(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    fs = _policy(["--tmpfs", "/m", "--dev-bind", str(tmp_path / "link"), "/m/a",
                  "--bind-try", str(tmp_path / "missing"), "/m/b", "c"])[0].fs
    assert fs == (P.Tmpfs("/m", mode=0o755), P.Bind(str(tmp_path / "real"), "/m/a", dev=True))
    with pytest.raises(BwrapArgumentError) as info:
        _policy(["--bind", str(tmp_path / "missing"), "/m", "c"])
    assert info.value.args[0] == f"Can't find source path {tmp_path / 'missing'}: No such file or directory"


def test_bind_fd_resolves_the_descriptor(tmp_path):
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        fs = _policy(["--tmpfs", "/m", "--ro-bind-fd", str(fd), "/m/a", "c"])[0].fs
    finally:
        os.close(fd)
    assert fs[-1] == P.Bind(str(tmp_path), "/m/a", readonly=True)


def test_proc_without_pid_namespace_binds_the_system_procfs():
    fs = _policy(["--tmpfs", "/m", "--proc", "/m/proc", "c"])[0].fs
    assert fs[1] == P.Bind("/proc", "/m/proc")


def test_seccomp_programs_from_both_options():
    assert _policy(["--add-seccomp-fd", "4", "--add-seccomp-fd", "5", "c"], {4: BPF, 5: BPF * 2})[0].seccomp == \
        (BPF, BPF * 2)
    assert _policy(["--seccomp", "4", "c"], {4: BPF})[0].seccomp == (BPF,)
    with pytest.raises(BwrapArgumentError) as info:
        _policy(["--seccomp", "4", "c"], {4: b"123"})
    assert info.value.args[0] == "Invalid seccomp data, must be multiple of 8"
    with pytest.raises(BwrapArgumentError) as info:
        _policy(["--seccomp", "9", "c"])
    assert info.value.args[0] == "Can't read seccomp data: Bad file descriptor"


def test_capabilities_follow_bwrap_rules():
    root_caps = frozenset({0, 12, 21})
    names = lambda argv, uid=0: _policy(argv, uid=uid, caps=root_caps)[0].caps_keep  # noqa: E731
    assert names(["c"]) == {"chown", "net_admin", "sys_admin"}
    assert names(["--cap-drop", "CAP_SYS_ADMIN", "c"]) == {"chown", "net_admin"}
    assert names(["--cap-drop", "ALL", "--cap-add", "CAP_KILL", "c"]) == {"kill"}
    assert names(["--unshare-user", "--uid", "5", "c"]) == set()
    assert names(["c"], uid=1000) == set()
    assert names(["--cap-add", "CAP_NET_RAW", "c"], uid=1000) == {"net_raw"}
    assert len(names(["--cap-add", "ALL", "c"], uid=1000)) == len(P.CAPABILITIES)


def test_uid_gid_chdir_argv0_env():
    policy, _ = _policy(["--uid", "0", "--gid", "0", "--chdir", "rel", "--argv0", "a0", "--clearenv",
                         "--setenv", "K", "v", "c"])
    assert (policy.uid, policy.gid, policy.chdir, policy.argv0) == (0, 0, "/rel", "a0")
    assert policy.env.apply({"X": "1"}) == {"K": "v"}


def test_disable_userns_and_assert():
    policy, _ = _policy(["--unshare-user", "--disable-userns", "--assert-userns-disabled", "c"])
    assert not policy.allow_nested_userns


def test_lock_sync_info_json_block_fds_recorded():
    _, compat = _policy(["--lock-file", "/l", "--sync-fd", "3", "--info-fd", "4", "--json-status-fd", "5", "c"])
    assert compat.lock_files == ("/l",) and (compat.sync_fd, compat.info_fd, compat.json_status_fd) == (3, 4, 5)
    assert set(compat.consumed_fds) == {3, 4, 5}
    policy, compat = _policy(["--unshare-pid", "--as-pid-1", "--sync-fd", "3", "--block-fd", "6", "c"])
    assert compat.consumed_fds == (6,) and policy.block_fd == 6   # --as-pid-1 leaks the sync fd, as bwrap


def test_block_fds_become_policy_fields():
    policy, compat = _policy(["--unshare-user", "--uid", "5", "--info-fd", "4", "--userns-block-fd", "3",
                              "--block-fd", "6", "--json-status-fd", "7", "c"])
    assert (policy.userns_block_fd, policy.block_fd) == (3, 6)
    assert policy.uid is None and policy.gid is None     # the caller maps the ids; bwrap ignores --uid
    assert {3, 4, 6, 7} <= set(compat.consumed_fds)


def test_namespace_fds_become_policy_fields():
    policy, _ = _policy(["--userns", "3", "--pidns", "4", "--userns2", "5", "--uid", "7", "--proc", "/proc", "c"])
    assert (policy.userns_fd, policy.pidns_fd, policy.userns2_fd) == (3, 4, 5)
    assert policy.uid is None and policy.gid is None     # the joined namespace has its maps
    assert policy.allow_nested_userns and "pid" not in policy.namespaces
    assert any(isinstance(op, P.Proc) for op in policy.fs)  # a new procfs: not the caller's pid namespace


OVERLAYS = [
    (["--overlay-src", "/usr", "--tmp-overlay", "/o", "c"], P.Overlay("/o", ("/usr",), tmp=True)),
    (["--overlay-src", "/usr", "--overlay-src", "/etc", "--ro-overlay", "/o", "c"], P.Overlay("/o", ("/usr", "/etc"))),
    (["--overlay-src", "/usr", "--overlay", "/var", "/srv", "/o", "c"], P.Overlay("/o", ("/usr",), "/var", "/srv")),
]


@pytest.mark.parametrize("argv,want", OVERLAYS, ids=[" ".join(a) for a, _ in OVERLAYS])
def test_overlays_map_to_overlay_ops(argv, want):
    policy, _ = _policy(argv)
    assert want in policy.fs


def test_overlay_sources_are_realpathed_and_missing_ones_use_bwraps_words(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    policy, _ = _policy(["--overlay-src", str(tmp_path / "link"), "--tmp-overlay", "/o", "c"])
    assert P.Overlay("/o", (str(tmp_path / "real"),), tmp=True) in policy.fs
    with pytest.raises(BwrapArgumentError) as info:
        _policy(["--overlay-src", "/usr", "--overlay", str(tmp_path / "nope"), "/srv", "/o", "c"])
    assert info.value.args[0] == f"Can't find source path {tmp_path / 'nope'}: No such file or directory"


def test_parent_mode_follows_bwrap():
    assert parent_mode(0) == 0o700 and parent_mode(0o755) == 0o755 and parent_mode(0o750) == 0o750
    assert parent_mode(0o600) == 0o700 and parent_mode(0o604) == 0o705


def test_missing_parents_and_host_mountpoints_are_created_as_bwrap(tmp_path):
    (tmp_path / "rw").mkdir()
    (tmp_path / "f").write_text("x")
    fs = with_bwrap_parents([P.Tmpfs("/t"), P.Bind("/usr", "/t/a/b"), P.Dir("/t/c/d", mode=0o750),
                             P.Bind(str(tmp_path / "rw"), "/w"), P.Tmpfs("/w/new"),
                             P.Bind(str(tmp_path / "f"), "/w/file"), P.Tmpfs("/w/new/x")])
    assert fs == [P.Tmpfs("/t"), P.Dir("/t/a", mode=0o700), P.Bind("/usr", "/t/a/b"),
                  P.Dir("/t/c", mode=0o750), P.Dir("/t/c/d", mode=0o750),
                  P.Bind(str(tmp_path / "rw"), "/w"), P.Dir("/w/new", mode=0o755), P.Tmpfs("/w/new"),
                  P.File("/w/file", data=b"", mode=0o444), P.Bind(str(tmp_path / "f"), "/w/file"),
                  P.Tmpfs("/w/new/x")]
    assert P.Dir("/t/a", mode=0o700) in fs and P.Dir("/t/c", mode=0o750) in fs
    assert fs.index(P.Dir("/w/new", mode=0o755)) == fs.index(P.Tmpfs("/w/new")) - 1
    assert fs.index(P.File("/w/file", data=b"", mode=0o444)) == fs.index(P.Bind(str(tmp_path / "f"), "/w/file")) - 1
    assert P.Dir("/t/c/d", mode=0o750) in fs and fs.count(P.Dir("/t/c/d", mode=0o750)) == 1


# ---------------------------------------------------------------- round trip

PATHS = st.lists(st.sampled_from(["a", "b", "usr", "x y", "é"]), min_size=1, max_size=3).map(
    lambda parts: "/" + "/".join(parts))
WORD = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
FD = st.integers(min_value=3, max_value=2**31 - 1)
PERMS = st.one_of(st.none(), st.integers(min_value=0, max_value=0o7777))


@st.composite
def fs_ops(draw):
    kind = draw(st.sampled_from(["--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind",
                                 "--dev-bind-try", "--bind-fd", "--ro-bind-fd", "--remount-ro", "--proc",
                                 "--dev", "--mqueue", "--tmpfs", "--dir", "--file", "--bind-data",
                                 "--ro-bind-data", "--symlink", "--chmod", "--overlay", "--tmp-overlay",
                                 "--ro-overlay"]))
    dest = draw(PATHS)
    if kind in ("--bind-fd", "--ro-bind-fd"):
        fd = draw(FD)
        return bp.FsOp(kind, dest, src=f"/proc/self/fd/{fd}", fd=fd)
    if kind in bp.PERMS_DEFAULT:
        perms = draw(PERMS)
        perms = bp.PERMS_DEFAULT[kind] if perms is None else perms
        size = draw(st.one_of(st.none(), st.integers(1, bp.MAX_TMPFS_BYTES))) if kind == "--tmpfs" else None
        fd = draw(FD) if kind in ("--file", "--bind-data", "--ro-bind-data") else None
        return bp.FsOp(kind, dest, fd=fd, perms=perms, size=size)
    if kind == "--chmod":
        return bp.FsOp(kind, dest, perms=draw(st.integers(0, 0o7777)))
    if kind in ("--overlay", "--tmp-overlay", "--ro-overlay"):
        srcs = tuple(draw(st.lists(PATHS, min_size=2 if kind == "--ro-overlay" else 1, max_size=3)))
        if kind == "--overlay":
            return bp.FsOp(kind, dest, src=draw(PATHS), workdir=draw(PATHS), overlay_srcs=srcs)
        return bp.FsOp(kind, dest, overlay_srcs=srcs)
    if kind in ("--remount-ro", "--proc", "--dev", "--mqueue"):
        return bp.FsOp(kind, dest)
    return bp.FsOp(kind, dest, src=draw(PATHS) if kind != "--symlink" else draw(WORD.filter(bool)))


@st.composite
def bwrap_args(draw):
    a = bp.BwrapArgs()
    for flag in ("unshare_user", "unshare_user_try", "unshare_ipc", "unshare_pid", "unshare_net", "unshare_uts",
                 "unshare_cgroup", "unshare_cgroup_try", "disable_userns", "assert_userns_disabled",
                 "level_prefix", "new_session", "die_with_parent", "as_pid_1", "not_a_security_boundary"):
        setattr(a, flag, draw(st.booleans()))
    for attr in ("uid", "gid", "sync_fd", "block_fd", "userns_block_fd", "info_fd", "json_status_fd",
                 "userns_fd", "userns2_fd", "pidns_fd", "seccomp_fd"):
        setattr(a, attr, draw(st.one_of(st.none(), st.integers(0, 2**31 - 1))))
    for attr in ("hostname", "chdir", "argv0"):
        # an empty --chdir path is refused at parse time (bwrap_compat/README.md, versions)
        setattr(a, attr, draw(st.one_of(st.none(), WORD.filter(bool) if attr == "chdir" else WORD)))
    a.lock_files = draw(st.lists(PATHS, max_size=2))
    a.env_ops = draw(st.lists(st.one_of(st.just(("clear",)), st.tuples(st.just("unset"), WORD),
                                        st.tuples(st.just("set"), WORD, WORD)), max_size=4))
    a.cap_ops = draw(st.lists(st.tuples(st.sampled_from(["add", "drop"]), st.one_of(
        st.just(bp.ALL_CAPS), st.integers(0, 63).map(lambda c: frozenset({c})))), max_size=3))
    a.ops = draw(st.lists(fs_ops(), max_size=6))
    a.consumed_fds = [op.fd for op in a.ops if op.fd is not None]
    a.command = draw(st.lists(WORD, min_size=1, max_size=3))
    return a


@settings(deadline=None, max_examples=200)
@given(bwrap_args())
def test_round_trip(args):
    back = parse(to_argv(args))
    assert back == args


# ---------------------------------------------------------------- the command line and its start-up

def _pybwrap(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "bwrap_compat", *argv], capture_output=True, text=True,
                          env=env)


def test_cli_messages_and_exit_codes():
    done = _pybwrap("--version")
    first, second = done.stdout.splitlines()
    assert done.returncode == 0 and first == "bubblewrap 0.11.0"   # bwrap's line, as tools parse it
    import pysandbox
    assert second.startswith(f"pybwrap {pysandbox.__version__} (pysandbox")
    done = _pybwrap("--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]")
    assert "--overlay-src SRC" in done.stdout and "parity layer" in done.stdout
    done = _pybwrap()
    assert done.returncode == 1 and done.stderr.startswith("usage: ") and not done.stdout
    done = _pybwrap("--bogus")
    assert (done.returncode, done.stderr) == (1, "bwrap: Unknown option --bogus\n")
    done = _pybwrap("--level-prefix", "--chdir", "/", "--chdir", "/", "--bogus")
    assert done.stderr == "<4>bwrap: Only the last --chdir option will take effect\n<3>bwrap: Unknown option --bogus\n"
    done = _pybwrap("--userns", "1023", "true")      # not open: setup fails, bwrap's way
    assert done.returncode == 1 and done.stderr == "bwrap: Joining specified user namespace failed: Bad file descriptor\n"


def test_cli_works_under_the_name_bwrap(tmp_path):
    script = tmp_path / "bwrap"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom bwrap_compat.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    done = subprocess.run([str(script), "--bogus"], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (1, "bwrap: Unknown option --bogus\n")
    done = subprocess.run([str(script)], capture_output=True, text=True)
    assert done.stderr.startswith(f"usage: {script} [OPTIONS...]")


def test_import_path_stays_lean():
    code = ("import sys, bwrap_compat.cli, bwrap_compat.parser, bwrap_compat.mapping, bwrap_compat.launch; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyroute2', 'hypothesis', 'pytest')); "
            "print(','.join(bad))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
    code = "import sys, bwrap_compat.cli; print(sorted(m for m in sys.modules if m.startswith('pysandbox')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"   # --version needs nothing else


def test_setup_errors_worded_as_bwrap():
    from bwrap_compat.cli import bwrap_message
    from pysandbox.errors import SetupError
    err = SetupError("tmpfs /x: Permission denied (plan step 4)", Reason.SETUP_FAILED, stage="tmpfs",
                     errno=errno.EACCES, filename="/x")
    assert bwrap_message(err) == "Can't mount tmpfs on /x: Permission denied"
    err = SetupError("pivot_root: Invalid argument", Reason.SETUP_FAILED, stage="pivot_root", errno=errno.EINVAL)
    assert bwrap_message(err) == "pivot_root: Invalid argument"
