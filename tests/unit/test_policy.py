"""Policy validation: every invalid input is a PolicyError with a reason, never another exception."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pysandbox import errors
from pysandbox.errors import PolicyError, Reason
from pysandbox.policy import (Bind, Chmod, Dev, Dir, Env, File, Hide, Network, Policy, Proc, RemountRo,
                              Symlink, Tmpfs, check_path)

SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Anything a caller might pass by mistake.
junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=30),
                 st.binary(max_size=30), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
bad_paths = st.one_of(
    st.text(max_size=20).filter(lambda s: not s.startswith("/")),            # relative or empty
    st.text(max_size=20).map(lambda s: "/" + s + "\x00" + s),                 # NUL inside
    st.lists(st.sampled_from(["a", "..", "b"]), min_size=1, max_size=4)
    .filter(lambda p: ".." in p).map(lambda p: "/" + "/".join(p)),           # dot-dot
    st.just("/" + "x" * 300),                                                 # NAME_MAX
    st.just("/" + "a/" * 2100),                                               # PATH_MAX
    st.integers(), st.none(), st.binary(max_size=3).map(lambda b: b"\xff" + b),
)


def _valid_or_policy_error(build):
    try:
        build()
    except PolicyError as exc:
        assert isinstance(exc.reason, Reason)
        assert isinstance(exc, ValueError)


@SETTINGS
@given(bad_paths)
def test_bad_paths_are_policy_errors(path):
    with pytest.raises(PolicyError) as info:
        check_path(path)
    assert info.value.reason == Reason.INVALID_PATH
    for build in (lambda: Tmpfs(path), lambda: Proc(path), lambda: Dev(path), lambda: Dir(path),
                  lambda: Hide(path), lambda: RemountRo(path), lambda: Bind("/", path),
                  lambda: Policy(chdir=path if path is not None else 1)):
        with pytest.raises(PolicyError):
            build()


@SETTINGS
@given(st.one_of(st.integers().filter(lambda m: not 0 <= m <= 0o7777), st.text(max_size=6),
                 st.floats(), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_bad_modes(mode):
    if isinstance(mode, str):
        try:
            if 0 <= int(mode, 8) <= 0o7777:
                return   # a valid octal string
        except ValueError:
            pass
    for build in (lambda: Tmpfs("/x", mode=mode), lambda: Dir("/x", mode=mode), lambda: Chmod("/x", mode)):
        with pytest.raises(PolicyError) as info:
            build()
        assert info.value.reason == Reason.INVALID_MODE


@SETTINGS
@given(st.one_of(st.integers(max_value=0), st.integers(min_value=2**63), st.floats(), st.text(max_size=4),
                 st.booleans()))
def test_bad_sizes(size):
    with pytest.raises(PolicyError) as info:
        Tmpfs("/x", size=size)
    assert info.value.reason == Reason.INVALID_SIZE


@SETTINGS
@given(st.fixed_dictionaries({}, optional={
    "fs": st.one_of(junk, st.lists(junk, max_size=2)),
    "namespaces": st.one_of(junk, st.frozensets(st.sampled_from(["user", "pid", "net", "mount", "x", "ipc"]))),
    "network": st.one_of(junk, st.sampled_from(["deny", "allow", "proxy", "nope"])),
    "env": junk, "chdir": st.one_of(junk, bad_paths), "uid": junk, "gid": junk,
    "hostname": st.one_of(junk, st.text(max_size=70)), "die_with_parent": junk, "new_session": junk,
    "as_pid_1": junk, "caps_keep": st.one_of(junk, st.lists(st.text(max_size=12), max_size=2)),
    "pass_fds": st.one_of(junk, st.lists(st.integers(), max_size=3)),
    "allow_nested_userns": junk, "seccomp": st.one_of(junk, st.lists(st.binary(max_size=20), max_size=2)),
    "argv0": junk,
}))
def test_any_policy_input_is_valid_or_policy_error(kwargs):
    _valid_or_policy_error(lambda: Policy(**kwargs))


@SETTINGS
@given(st.tuples(junk, junk, junk, junk, junk, junk))
def test_any_fs_op_input_is_valid_or_policy_error(a):
    for build in (lambda: Bind(a[0], a[1], a[2], a[3], a[4], a[5]), lambda: Tmpfs(a[0], a[1], a[2]),
                  lambda: File(a[0], a[1], a[2], a[3], a[4], a[5]), lambda: Symlink(a[0], a[1]),
                  lambda: Chmod(a[0], a[1]), lambda: Network(a[0], a[1] if isinstance(a[1], tuple) else ()),
                  lambda: Env(a[0], a[1] if isinstance(a[1], (tuple, list, dict)) else (), ())):
        _valid_or_policy_error(build)


@SETTINGS
@given(st.one_of(st.lists(junk, max_size=3), st.lists(bad_paths, min_size=1, max_size=2)),
       st.sampled_from(["ro", "rw", "hide", "tmpfs"]))
def test_default_with_bad_lists(values, kind):
    _valid_or_policy_error(lambda: Policy.default(**{kind: values}))


def test_default_with_missing_bind_source(tmp_path):
    with pytest.raises(PolicyError) as info:
        Policy.default(ro=[str(tmp_path / "absent")])
    assert info.value.reason == Reason.BIND_SOURCE_MISSING
    assert info.value.value == str(tmp_path / "absent")


@pytest.mark.parametrize("kwargs, reason", [
    ({"namespaces": frozenset({"pid"})}, Reason.CONFLICTING_OPTIONS),          # no user namespace
    ({"namespaces": frozenset({"user", "net"})}, Reason.CONFLICTING_OPTIONS),
    ({"namespaces": frozenset({"user", "bogus"})}, Reason.INVALID_VALUE),
    ({"namespaces": "user"}, Reason.INVALID_VALUE),
    ({"hostname": "box", "namespaces": frozenset({"user"})}, Reason.CONFLICTING_OPTIONS),
    ({"as_pid_1": True, "namespaces": frozenset({"user"})}, Reason.CONFLICTING_OPTIONS),
    ({"pass_fds": (1,)}, Reason.INVALID_VALUE),
    ({"caps_keep": ("cap_nonsense",)}, Reason.INVALID_VALUE),
    ({"network": "proxi"}, Reason.INVALID_VALUE),
    ({"seccomp": (b"1234567",)}, Reason.INVALID_VALUE),
    ({"uid": -1}, Reason.INVALID_VALUE),
])
def test_conflicts_and_values(kwargs, reason):
    with pytest.raises(PolicyError) as info:
        Policy(**kwargs)
    assert info.value.reason == reason


def test_file_conflicts():
    with pytest.raises(PolicyError) as info:
        File("/f", data=b"x", fd=3)
    assert info.value.reason == Reason.CONFLICTING_OPTIONS
    with pytest.raises(PolicyError) as info:
        File("/f", data=b"x", readonly=True)
    assert info.value.reason == Reason.CONFLICTING_OPTIONS
    with pytest.raises(PolicyError):
        Bind("/a", "/b", src_fd=3)
    with pytest.raises(PolicyError):
        Network("allow", ("example.org",))


def test_valid_inputs_are_normalised():
    assert check_path("//a/./b/") == "/a/b"
    assert Tmpfs("/t", mode="755").mode == 0o755
    assert Policy(caps_keep=("CAP_NET_RAW",)).caps_keep == frozenset({"net_raw"})
    assert Policy(pass_fds=(5, 4, 5)).pass_fds == (4, 5)
    assert Policy(network="allow").network == Network("allow")
    assert Env(set={"A": "1"}).apply({"B": "2"}) == {"A": "1", "B": "2"}
    assert Env(clear=True, set=(("A", "1"),)).apply({"B": "2"}) == {"A": "1"}
    assert Env(unset=("B",)).apply({"B": "2", "C": "3"}) == {"C": "3"}


def test_default_policy_shape(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    p = Policy.default(workdir=str(wd), network="allow")
    assert p.fs[:4] == (Bind("/", "/", readonly=True), Dev("/dev"), Proc("/proc"), Tmpfs("/tmp"))
    assert Bind(str(wd), str(wd)) in p.fs
    assert p.chdir == str(wd)
    assert p.writable_paths == (str(wd),)
    assert {"user", "pid", "ipc", "uts"} <= p.namespaces
    assert p.die_with_parent and p.new_session
    relative = os.path.relpath(wd)
    assert Policy.default(workdir=relative, network="allow").chdir == str(wd)


def test_policy_error_is_in_the_tree():
    assert issubclass(PolicyError, errors.SandboxError)
    assert issubclass(PolicyError, ValueError)


@pytest.mark.parametrize("kwargs, reason", [
    ({"block_fd": -1}, Reason.INVALID_VALUE),
    ({"userns_block_fd": "3"}, Reason.INVALID_VALUE),
    ({"block_fd": 5, "userns_block_fd": 5}, Reason.CONFLICTING_OPTIONS),
    ({"block_fd": 5, "pass_fds": (5,)}, Reason.CONFLICTING_OPTIONS),
    ({"userns_block_fd": 5, "uid": 0}, Reason.CONFLICTING_OPTIONS),
    ({"userns_fd": -2, "allow_nested_userns": True}, Reason.INVALID_VALUE),
    ({"pidns_fd": "4"}, Reason.INVALID_VALUE),
    ({"userns2_fd": True}, Reason.INVALID_VALUE),
    ({"userns_fd": 5, "gid": 0, "allow_nested_userns": True}, Reason.CONFLICTING_OPTIONS),
    ({"userns_fd": 5, "userns_block_fd": 6, "allow_nested_userns": True}, Reason.CONFLICTING_OPTIONS),
    ({"userns_fd": 5}, Reason.CONFLICTING_OPTIONS),   # nested user namespaces disabled: not ours to limit
])
def test_block_fd_validation(kwargs, reason):
    with pytest.raises(PolicyError) as info:
        Policy(**kwargs)
    assert info.value.reason == reason


def test_namespace_fds_may_also_be_passed():
    # setns leaves them open, so the command may get them too (unlike block fds)
    p = Policy(userns_fd=5, pidns_fd=6, userns2_fd=7, allow_nested_userns=True, pass_fds=(5, 6, 7))
    assert (p.userns_fd, p.pidns_fd, p.userns2_fd) == (5, 6, 7)


# ---------------------------------------------------------------- io_uring, environment allow-list, workdir breadth (THREAT_MODEL.md)

def test_env_keep_is_an_allow_list():
    from pysandbox.policy import Env
    base = {"PATH": "/bin", "HOME": "/h", "AWS_SECRET_ACCESS_KEY": "s", "GITHUB_TOKEN": "t"}
    assert Env().apply(base) == base                       # the default: everything reaches the command
    env = Env(keep=["PATH", "HOME", "PATH", "MISSING"], unset=("HOME",), set={"X": "1"})
    assert env.keep == ("PATH", "HOME", "MISSING")
    assert env.apply(base) == {"PATH": "/bin", "X": "1"}
    assert Env(keep=()).apply(base) == {}
    for bad, reason in (({"keep": "PATH"}, "invalid_value"), ({"keep": ["A=B"]}, "invalid_value"),
                        ({"keep": ["PATH"], "clear": True}, "conflicting_options"), ({"clear": 1}, "invalid_value")):
        with pytest.raises(PolicyError) as info:
            Env(**bad)
        assert info.value.reason.value == reason, bad


def test_workdir_root_is_too_broad(tmp_path):
    for wd in ("/", "//", "/.", "/./"):
        with pytest.raises(PolicyError) as info:
            Policy.default(workdir=wd)
        assert info.value.reason.value == "workdir_too_broad"
    assert Policy.default(workdir=tmp_path).chdir == str(tmp_path)     # control
    # an explicit read-write bind of / is too broad too, unless the caller opts in
    with pytest.raises(PolicyError) as info:
        Policy.default(rw=["/"], network="allow")
    assert info.value.reason.value == "writable_path_too_broad" and info.value.value == "/"
    assert "/" in Policy.default(rw=["/"], network="allow", allow_broad_writable=True).writable_paths


def test_allow_io_uring_only_where_no_socket_filter_depends_on_it():
    assert Policy.default().allow_io_uring is False
    assert Policy.default(network="allow", allow_io_uring=True).allow_io_uring is True
    for kwargs in ({"network": "deny"}, {"network": "allow", "strict_unix": True}):
        with pytest.raises(PolicyError) as info:
            Policy.default(allow_io_uring=True, **kwargs)
        assert info.value.reason.value == "conflicting_options"
    with pytest.raises(PolicyError):
        Policy(allow_io_uring="yes", network="allow")


def test_allow_syscalls_names_only_the_calls_refused_by_default():
    assert Policy.default().allow_syscalls == frozenset()
    p = Policy.default(allow_syscalls=["userfaultfd", "bpf", "bpf"])
    assert p.allow_syscalls == frozenset({"userfaultfd", "bpf"})
    assert Policy(allow_syscalls=("perf_event_open",)).allow_syscalls == frozenset({"perf_event_open"})
    for bad in ("bpf", ["ptrace"], ["keyctl"], ["io_uring_setup"], [1], 1):
        with pytest.raises(PolicyError) as info:
            Policy.default(allow_syscalls=bad)
        assert info.value.reason.value == "invalid_value" and info.value.field == "allow_syscalls", bad
    with pytest.raises(PolicyError) as info:
        Policy(allow_syscalls=["io_uring_enter"])
    assert "allow_io_uring" in str(info.value)


@given(st.text(alphabet=st.sampled_from("A_z9= \n\x00é"), max_size=6))
@settings(max_examples=300)
def test_env_names_are_judged_as_the_regex_judged_them(name):
    """The name check without a regex (issue 28: start-up) accepts exactly what
    ``re.match(r"^[^=\\x00]+$", name)`` accepted."""
    import re
    accepted = True
    try:
        Env(set=((name, "v"),))
    except PolicyError as exc:
        accepted = False
        assert exc.reason is Reason.INVALID_VALUE
    assert accepted == bool(re.match(r"^[^=\x00]+$", name))
