"""Bad input never crashes and never launches (docs/ARCHITECTURE.md, invariant 1). No sandbox is started here.

Hypothesis feeds arbitrary values to the Policy constructor, the filesystem
operations, ``Policy.default``, ``plan.compile``, the ``pysandbox`` command line and
(once it exists) the bwrap_compat parser. Each must either succeed or raise
``PolicyError`` with a ``Reason``: never another exception, never a traceback. On
the command line an argument list holding a known-invalid piece must end in a usage
error (exit 2) before anything is launched, and one made only of valid pieces must
reach the launch. The launch itself is replaced by a recorder: nothing runs.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pysandbox
import pysandbox.direct
import pysandbox.sandbox_start
from pysandbox import plan as _plan
from pysandbox import policy as P
from pysandbox.errors import PolicyError, Reason

# PYSANDBOX_SOAK=1 (the long reliability form) tries ten times as many inputs.
EXAMPLES = 2000 if os.environ.get("PYSANDBOX_SOAK") == "1" else 200
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LONG_COMPONENT = "n" * 300
LONG_PATH = "/" + "/".join(["d" * 200] * 21)          # > PATH_MAX (4096)
# A directory that is neither a system tree nor under /tmp (the private /tmp would shadow
# it), to be the default workdir and a writable path: the package's own
PACKAGE_DIR = os.path.dirname(os.path.realpath(pysandbox.__file__))

# Paths that are valid syntax, in every shape that trips naive code.
weird_names = st.sampled_from([
    "with space", "new\nline", "tab\there", "ünïcødé", "日本語", "emoji-🙂", "-dash", "--opt",
    "quote'\"", "back\\slash", "$HOME", "*glob?", "semi;colon", "percent%s", "a" * 255,
    "non-utf8-\udcff\udcfe",   # os.fsdecode(b"non-utf8-\xff\xfe"): bytes that are not UTF-8
])
weird_abs_paths = st.lists(weird_names, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
bad_paths = st.sampled_from([
    "", "relative", "./rel", "../up", "/a/../b", "/a/..", "/nul\x00byte", LONG_PATH,
    "/" + LONG_COMPONENT, "/lone\ud800surrogate", b"bytes\xff\xfe", "~", " /leading-space",
])
anything = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
              st.text(max_size=20), st.binary(max_size=20), weird_abs_paths, bad_paths),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.frozensets(st.text(max_size=8), max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
path_arg = st.one_of(weird_abs_paths, bad_paths, anything)


def _only_policy_error(fn, *args, **kwargs):
    """Call ``fn``; a PolicyError with a Reason is fine, anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except PolicyError as exc:
        assert isinstance(exc.reason, Reason), exc
        assert str(exc)
        return None


# ---------------------------------------------------------------- filesystem operations

fs_op = st.one_of(
    st.builds(P.Bind, path_arg, path_arg, readonly=anything, dev=st.booleans(), optional=anything),
    st.builds(P.Bind, st.none(), path_arg, src_fd=anything),
    st.builds(P.Tmpfs, path_arg, size=anything, mode=anything),
    st.builds(P.Proc, path_arg), st.builds(P.Dev, path_arg), st.builds(P.Mqueue, path_arg),
    st.builds(P.Dir, path_arg, mode=anything),
    st.builds(P.Symlink, anything, path_arg),
    st.builds(P.File, path_arg, data=anything, fd=anything, mode=anything, bind=st.booleans(),
              readonly=st.booleans()),
    st.builds(P.RemountRo, path_arg), st.builds(P.Chmod, path_arg, mode=anything),
    st.builds(P.Hide, path_arg),
)


@st.composite
def maybe_op(draw):
    """A filesystem op, or the PolicyError its constructor raised (both are fine)."""
    try:
        return draw(fs_op)
    except PolicyError as exc:
        assert isinstance(exc.reason, Reason)
        return None


@SETTINGS
@given(st.data())
def test_fs_operations_only_raise_policy_error(data):
    # st.builds raises inside draw: any exception but PolicyError fails here.
    data.draw(maybe_op())


@SETTINGS
@given(fs=st.one_of(st.lists(maybe_op(), max_size=4).map(lambda ops: [o for o in ops if o]), anything),
       namespaces=st.one_of(st.frozensets(st.sampled_from(P.NAMESPACES + ("mount", "bogus"))), anything),
       network=st.one_of(st.sampled_from(P.NETWORK_MODES + ("", "DENY", "none")), anything),
       env=st.one_of(st.builds(P.Env), anything), chdir=path_arg, uid=anything, gid=anything,
       hostname=anything, die_with_parent=anything, new_session=anything, as_pid_1=anything,
       caps_keep=anything, pass_fds=anything, allow_nested_userns=anything, seccomp=anything,
       argv0=anything)
def test_policy_constructor_only_raises_policy_error(**kwargs):
    policy = _only_policy_error(P.Policy, **kwargs)
    if policy is not None:
        _only_policy_error(_plan.compile, policy)


@SETTINGS
@given(clear=anything, set_=anything, unset=anything)
def test_env_only_raises_policy_error(clear, set_, unset):
    _only_policy_error(P.Env, clear=clear, set=set_, unset=unset)


@SETTINGS
@given(mode=anything, hosts=anything)
def test_network_only_raises_policy_error(mode, hosts):
    _only_policy_error(P.Network, mode, allow_hosts=hosts)


@SETTINGS
@given(workdir=st.one_of(st.none(), st.sampled_from(["/", "/usr", "/etc"]), path_arg),
       network=st.one_of(st.sampled_from(["deny", "allow", "proxy"]), anything),
       ro=st.one_of(st.lists(st.one_of(st.sampled_from(["/usr", "/etc"]), path_arg), max_size=3), anything),
       rw=st.one_of(st.lists(path_arg, max_size=3), anything),
       hide=st.one_of(st.lists(st.one_of(weird_abs_paths, path_arg), max_size=3), anything),
       tmpfs=st.one_of(st.lists(st.one_of(weird_abs_paths.map(lambda p: "/tmp" + p), path_arg),
                                max_size=3), anything))
def test_policy_default_only_raises_policy_error(workdir, network, ro, rw, hide, tmpfs):
    policy = _only_policy_error(P.Policy.default, workdir=workdir, network=network, ro=ro, rw=rw,
                                hide=hide, tmpfs=tmpfs)
    if policy is not None:
        _only_policy_error(_plan.compile, policy)


@pytest.mark.parametrize("bad", ["relative", "/a/../b", "/nul\x00", LONG_PATH, "/" + LONG_COMPONENT,
                                 "/lone\ud800", b"x\xff", "", 7, None])
def test_bad_paths_are_invalid_path(bad):
    for make in (lambda p: P.Bind(p, "/x"), lambda p: P.Bind("/", p), lambda p: P.Tmpfs(p),
                 lambda p: P.Hide(p), lambda p: P.Policy(chdir=p)):
        if bad is None and make is not None:
            continue
        with pytest.raises(PolicyError) as info:
            make(bad)
        assert info.value.reason == Reason.INVALID_PATH


@pytest.mark.parametrize("good", ["/with space", "/new\nline", "/ünï/日本", "/a/./b//c", "/" + "a" * 255,
                                  "/non-utf8-\udcff\udcfe/x"])
def test_weird_but_valid_paths_normalise(good):
    op = P.Tmpfs(good)
    assert op.dest == "/" + "/".join(p for p in good.split("/") if p not in ("", "."))
    assert P.Tmpfs(os.fsencode(good)).dest == op.dest   # the same path given as bytes


def test_non_utf8_component_length_counts_bytes():
    assert P.Tmpfs("/" + "\udcff" * 255).dest == "/" + "\udcff" * 255
    with pytest.raises(PolicyError) as info:
        P.Tmpfs("/" + "é" * 128)   # 256 bytes in UTF-8
    assert info.value.reason == Reason.INVALID_PATH


# ---------------------------------------------------------------- the command line

class Launched(BaseException):
    """Raised by the recording Popen: the CLI got as far as launching."""

    def __init__(self, command, policy):
        super().__init__(command)
        self.command = command
        self.policy = policy


def _recording_popen(command, *, policy=None, backend="auto", **kwargs):
    # What the real launch does before the backend: validate arguments, compile.
    pysandbox.sandbox_start.compiled(policy)
    raise Launched(list(command), policy)


VALID = [
    ["--network", "deny"], ["--network", "allow"], ["--network", "proxy"], ["--backend", "auto"], ["--backend", "native"],
    ["--backend", "bwrap"], ["--ro", "/usr"], ["--ro", "/etc"], ["--rw", PACKAGE_DIR + "/profiles"],
    ["--hide", "/nonexistent/with space"], ["--hide", "/no\nsuch/ünï"], ["--tmpfs", "/tmp/with space"],
    ["--tmpfs", "/tmp/日本"], ["--chdir", "/usr"], ["--setenv", "NAME", "value with\nnewline"],
    ["--setenv", "X_1", ""], ["--unsetenv", "HOME"], ["--clearenv"], ["--share-session"],
    ["--timeout", "1.5"], ["--no-workdir"], ["--workdir", PACKAGE_DIR], ["-v"],
]
INVALID = [
    ["--allow-host", "no such host"], ["--network", ""], ["--backend", "docker"], ["--ro", "relative"],
    ["--rw", "/a/../b"], ["--ro", "/nonexistent/source"], ["--hide", LONG_PATH],
    ["--tmpfs", "/" + LONG_COMPONENT], ["--tmpfs", "/nonexistent-mountpoint-under-ro-root"],
    ["--chdir", "rel"], ["--setenv", "A=B", "v"], ["--setenv", "", "v"], ["--unsetenv", "A=B"],
    ["--timeout", "0"], ["--timeout", "-1"], ["--timeout", "nan"], ["--timeout", "inf"],
    ["--timeout", "soon"], ["--pass-fd", "0"], ["--pass-fd", "-3"], ["--pass-fd", "x"],
    ["--pass-fd", "99999"], ["--workdir", "rel/dir"], ["--bogus-option"], ["--setenv", "ONLY"],
    ["--rw", "/usr"], ["--rw", "/"], ["--workdir", "/etc"],   # writable_path_too_broad
]
commands = st.lists(st.one_of(st.sampled_from(["true", "/bin/sh", "-c", "--", "--help", "-v"]),
                              st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=30)),
                    min_size=1, max_size=4)


def _cli(argv):
    """Run the CLI in-process. Returns (outcome, code, stderr, launched)."""
    from pysandbox import cli
    err = io.StringIO()
    launched = None
    code = None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
        except Launched as exc:
            launched = exc
    return code, err.getvalue(), launched


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setattr(pysandbox.direct, "DirectProcess", _recording_popen)   # the CLI's launch
    monkeypatch.chdir(PACKAGE_DIR)   # the default workdir ("/" is refused, /usr too broad)


@SETTINGS
@given(pieces=st.lists(st.sampled_from(VALID), max_size=5), bad=st.lists(st.sampled_from(INVALID),
       min_size=0, max_size=2), data=st.data(), command=commands)
def test_cli_run_fuzz(recording, pieces, bad, data, command):
    items = list(pieces)
    for b in bad:
        items.insert(data.draw(st.integers(0, len(items))), b)
    exclusive = any(p[0] == "--no-workdir" for p in items) and any(p[0] == "--workdir" for p in items)
    # --workdir and --chdir are checked as paths after parsing: the last one given wins,
    # so a bad one followed by another of the same option is not an error. (Type and
    # choice errors, e.g. --timeout soon, stop the parse wherever they are.)
    last_wins = ("--workdir", "--chdir")
    bad = [b for b in bad if not (b[0] in last_wins and
                                  [p[0] for p in items][::-1].index(b[0]) < items[::-1].index(b))]
    argv = ["run", *[tok for item in items for tok in item], "--", *command]
    code, err, launched = _cli(argv)
    assert "Traceback" not in err
    if bad or exclusive:
        assert launched is None, f"launched with invalid input {bad}: {argv!r}"
        assert code == 2, (argv, code, err)
        assert err.strip(), "a usage error must say what is wrong"
    else:
        assert launched is not None, (argv, code, err)
        assert launched.command == command
        assert isinstance(launched.policy, P.Policy)


@SETTINGS
@given(argv=st.lists(st.one_of(st.sampled_from(["run", "status", "--", "--json", "--network", "--backend",
                                                "--ro", "--timeout", "--pass-fd", "-h", "--help", "--profile"]),
                               st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=12)),
                     max_size=6))
def test_cli_any_argv_never_tracebacks(recording, monkeypatch, argv):
    import pysandbox.cli as cli
    monkeypatch.setattr(cli, "_status", lambda args, profile=None: 0)   # status probes the host: not in unit tests
    code, err, launched = _cli(argv)
    assert "Traceback" not in err
    if launched is None:
        assert isinstance(code, int) and code in (0, 2), (argv, code, err)


def test_cli_missing_command_is_usage_error(recording):
    code, err, launched = _cli(["run", "--"])
    assert (code, launched) == (2, None) and err.strip()


def test_cli_argument_beyond_max_arg_strlen_reaches_launch_unchanged(recording):
    """The CLI does not truncate or choke on a 200 KiB argument (the exec decides)."""
    big = "x" * (200 * 1024)
    code, err, launched = _cli(["run", "--", "/bin/echo", big])
    assert launched is not None and launched.command == ["/bin/echo", big], (code, err)


# ---------------------------------------------------------------- bwrap_compat

BWRAP_TOKENS = ["--ro-bind", "--bind", "--dev-bind", "--bind-try", "--tmpfs", "--proc", "--dev",
                "--dir", "--symlink", "--chdir", "--setenv", "--unsetenv", "--unshare-all",
                "--unshare-net", "--share-net", "--unshare-user", "--uid", "--gid", "--hostname",
                "--perms", "--size", "--file", "--bind-data", "--args", "--cap-add", "--cap-drop",
                "--remount-ro", "--chmod", "--die-with-parent", "--new-session", "--as-pid-1",
                "--overlay-src", "--overlay", "--tmp-overlay", "--level-prefix", "--userns", "--seccomp",
                "--", "/", "/usr", "/tmp", "relative", "/a/../b", "0755", "999", "-1", "ALL",
                "CAP_NET_ADMIN", "CAP_BOGUS", "--bogus", "true", "/new\nline", "/ünï code"]
# No bare small numbers: "--args 0" would read the test's stdin. Descriptor options get
# 999 (not open) or -1 from the token list.
bwrap_text = st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=10).filter(
    lambda t: not t.strip().lstrip("+-").isdigit())


@SETTINGS
@given(argv=st.lists(st.one_of(st.sampled_from(BWRAP_TOKENS), bwrap_text), max_size=10))
def test_bwrap_compat_parser_only_raises_typed_errors(argv):
    """parse -> check -> to_policy: a typed error with a reason (usage error, unsupported
    option), never another exception."""
    import bwrap_compat
    from pysandbox.errors import SandboxError
    try:
        policy, _compat = bwrap_compat.to_policy(bwrap_compat.check(bwrap_compat.parse(argv)))
    except SandboxError as exc:
        assert isinstance(exc.reason, Reason), exc
        assert str(exc)
        return
    assert isinstance(policy, P.Policy)


BWRAP_ARITY = {"--ro-bind": 2, "--bind": 2, "--dev-bind": 2, "--ro-bind-try": 2, "--tmpfs": 1,
               "--dir": 1, "--symlink": 2, "--chdir": 1, "--setenv": 2, "--unsetenv": 1, "--perms": 1,
               "--size": 1, "--uid": 1, "--gid": 1, "--hostname": 1, "--cap-add": 1, "--cap-drop": 1,
               "--chmod": 2, "--remount-ro": 1, "--proc": 1, "--dev": 1, "--mqueue": 1,
               "--unshare-all": 0, "--unshare-net": 0, "--share-net": 0, "--unshare-user": 0,
               "--unshare-pid": 0, "--unshare-uts": 0, "--die-with-parent": 0, "--new-session": 0,
               "--as-pid-1": 0, "--clearenv": 0, "--disable-userns": 0}
bwrap_value = st.one_of(st.sampled_from(["/", "/usr", "/etc", "/tmp", "/tmp/x y", "/new\nline", "/ünï",
                                         "relative", "/a/../b", "0700", "1777", "8", "1k", "-5",
                                         "65534", "4294967295", "host-name", "bad host!", "ALL",
                                         "CAP_NET_ADMIN", "CAP_NOPE", "NAME", "A=B", ""]),
                        weird_abs_paths, bwrap_text)


@st.composite
def bwrap_argv(draw):
    argv = []
    for opt in draw(st.lists(st.sampled_from(sorted(BWRAP_ARITY)), max_size=8)):
        argv.append(opt)
        argv.extend(draw(bwrap_value) for _ in range(BWRAP_ARITY[opt]))
    return argv + ["--", "true"]


@SETTINGS
@given(argv=bwrap_argv())
def test_bwrap_compat_structured_argv_only_raises_typed_errors(argv):
    test_bwrap_compat_parser_only_raises_typed_errors.hypothesis.inner_test(argv)


@SETTINGS
@given(argv=st.one_of(bwrap_argv(), st.lists(st.one_of(st.sampled_from(BWRAP_TOKENS + ["--help", "--version"]),
                                                        bwrap_text), max_size=10)))
def test_pybwrap_cli_never_tracebacks(monkeypatch, argv):
    """pybwrap: bwrap's exit codes (0 help/version, 1 any error), a ``bwrap: `` message,
    never a traceback; a launch only with an argv the parser and mapper accepted."""
    import bwrap_compat.cli as bcli
    import bwrap_compat.launch as blaunch

    def recording_run(args, backend="native", parent_pid=None):
        policy, _compat = bwrap_compat_to_policy(args)
        raise Launched(list(args.command) if hasattr(args, "command") else [], policy)

    def bwrap_compat_to_policy(args):
        import bwrap_compat
        return bwrap_compat.to_policy(args)

    monkeypatch.setattr(blaunch, "run", recording_run)
    err, out = io.StringIO(), io.StringIO()
    launched = None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = bcli.main(argv)
        except Launched as exc:
            launched, code = exc, None
    assert "Traceback" not in err.getvalue()
    if launched is None:
        assert code in (0, 1), (argv, code, err.getvalue())
        if code == 1:
            assert err.getvalue().startswith(("bwrap: ", "usage: ")) or "bwrap: " in err.getvalue() \
                or err.getvalue().startswith("<"), err.getvalue()
    else:
        assert isinstance(launched.policy, P.Policy)
