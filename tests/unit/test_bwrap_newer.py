"""Where pybwrap follows a bubblewrap newer than 0.11 (or 0.8): empty path arguments
refused, ``--symlink``'s 0.9+ messages (bwrap_compat/README.md, "Which bubblewrap
version each behaviour follows"). The runs against the real binaries are in
tests/compat/test_corpus.py."""

from __future__ import annotations

import errno

import pytest

from bwrap_compat.launch import existing_link
from bwrap_compat.messages import bwrap_message
from bwrap_compat.parser import PATH_ARGS, parse
from pysandbox import ops as O
from pysandbox.errors import BwrapArgumentError, Reason, SetupError
from pysandbox.policy import Policy

R = ["--ro-bind", "/", "/"]


def _args_for(option: str, empty_at: int) -> list:
    count = max(PATH_ARGS[option])
    words = [f"/p{k}" for k in range(1, count + 1)]
    if option in ("--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data"):
        words[0] = "5"   # a descriptor
    if option == "--chmod":
        words[0] = "0755"
    words[empty_at - 1] = ""
    prefix = ["--overlay-src", "/l"] if option in ("--overlay", "--tmp-overlay") else \
        ["--overlay-src", "/l", "--overlay-src", "/m"] if option == "--ro-overlay" else []
    return prefix + [option] + words + ["true"]


@pytest.mark.parametrize("option,position", [(o, k) for o, ks in PATH_ARGS.items() for k in ks])
def test_an_empty_path_argument_is_refused(option, position):
    argv = _args_for(option, position)
    with pytest.raises(BwrapArgumentError) as info:
        parse(argv, read_fd=lambda fd: b"", close_fd=lambda fd: None)
    assert info.value.reason is Reason.BWRAP_ARGUMENT_INVALID
    assert info.value.args[0] == f"Empty path argument to {option} is not allowed"
    # live control: the same line with a path there parses (or fails for another reason)
    argv[argv.index("")] = "/x"
    try:
        parse(argv, read_fd=lambda fd: b"", close_fd=lambda fd: None)
    except BwrapArgumentError as exc:
        assert "Empty path" not in exc.args[0]


def test_empty_non_path_arguments_are_still_bwraps_business():
    args = parse(R + ["--setenv", "E", "", "--hostname", "", "true"])
    assert ("set", "E", "") in args.env_ops and args.hostname == ""


def _eexist(dest, op_index):
    return SetupError("symlink: File exists", Reason.SETUP_FAILED, stage="symlink", op=op_index,
                      errno=errno.EEXIST, filename=dest)


def test_existing_link_from_an_earlier_symlink_op():
    done = (O.MountTmpfs("/tmp"), O.MakeSymlink("/x", "/tmp/l"))
    assert existing_link("/tmp/l", done) == "/x"
    assert existing_link("/tmp/other", done) is None
    # a later mount on top hides the earlier link
    assert existing_link("/tmp/l", done + (O.MountTmpfs("/tmp"),)) is None


def test_existing_link_of_minimal_dev():
    assert existing_link("/dev/stdin", (O.MinimalDev("/dev"),)) == "/proc/self/fd/0"
    assert existing_link("/dev/ptmx", (O.MinimalDev("/dev"),)) == "pts/ptmx"
    assert existing_link("/dev/null", (O.MinimalDev("/dev"),)) is None


def test_existing_link_on_the_host(tmp_path):
    (tmp_path / "link").symlink_to("some/where")
    (tmp_path / "dir").mkdir()
    done = (O.BindMount(str(tmp_path), "/mnt", readonly=True),)
    assert existing_link("/mnt/link", done) == "some/where"
    assert existing_link("/mnt/dir", done) is None


def test_messages_are_bwrap_0_9s():
    exc = _eexist("/tmp/l", 2)
    exc.existing_link = "/x"
    assert bwrap_message(exc) == "Can't make symlink at /tmp/l: existing destination is /x"
    exc.existing_link = None
    assert bwrap_message(exc) == "Can't make symlink at /tmp/l: destination exists and is not a symlink"
    # without the launcher's finding: the errno, as before
    assert bwrap_message(_eexist("/tmp/l", 2)) == "Can't make symlink at /tmp/l: File exists"


def test_the_bwrap_backend_renders_a_repeated_symlink_once():
    """The shared model accepts the same symlink twice (native, bwrap >= 0.9): the bwrap
    backend leaves the repeat out, so bwrap 0.8 agrees; anything else is rendered."""
    from pysandbox.policy import Symlink, Tmpfs
    from tests.unit.test_backend_bwrap import opts as render
    twice = render(Policy(fs=(Tmpfs("/"), Tmpfs("/mnt"), Symlink("/usr", "/mnt/l"), Symlink("/usr", "/mnt/l"))))
    assert [o for o in twice if o[0] == "--symlink"] == [("--symlink", "/usr", "/mnt/l")]
    other = render(Policy(fs=(Tmpfs("/"), Tmpfs("/mnt"), Symlink("/usr", "/mnt/l"), Symlink("/x", "/mnt/l"))))
    assert len([o for o in other if o[0] == "--symlink"]) == 2
    remade = render(Policy(fs=(Tmpfs("/"), Tmpfs("/mnt"), Symlink("/usr", "/mnt/l"), Tmpfs("/mnt"),
                               Symlink("/usr", "/mnt/l"))))
    assert len([o for o in remade if o[0] == "--symlink"]) == 2
