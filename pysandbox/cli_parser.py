"""The ``pysandbox`` command line's argparse parser: ``run`` and ``status`` with their
options, help and epilog. Imported only when a command line needs it: the common
``pysandbox run -- CMD ...`` is read by cli_fast.py without argparse (and gettext)."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__, cli_home, cli_limits, cli_protect, cli_seccomp, cli_workspace
from .cli_errors import EXIT_USAGE, PROG

VERBOSE_HELP = "log the backend choice and the setup's steps with their timings to stderr"

RUN_EPILOG = """\
exit status: the command's own; 128+N when it was killed by signal N; 125 when the
sandbox could not be set up (the command never ran; one stderr line names the reason
code); 126 command not executable; 127 command not found; 2 usage error.
--timeout sends SIGTERM to the command, then SIGKILL to the whole sandbox 2 seconds
later. SIGTERM, SIGINT and SIGHUP sent to pysandbox are forwarded to the command.

workdir: the current directory by default, bound read-write. '/' is refused as a
workdir (reason workdir_too_broad); when the current directory is your home
directory or one of its ancestors, name the workdir explicitly (--workdir DIR) or
pass --no-workdir.

writable paths (--rw, --workdir): /, a system tree (/usr, /etc, /var, ...), a home or an
ancestor of one is refused (writable_path_too_broad) unless --allow-broad-writable. A path
named through a symlink inside a writable path (the command could have planted it) is
refused (symlink_in_path) unless --follow-writable-symlinks; others (/var/run) are followed.

environment: by default the caller's whole environment reaches the command, secrets
included (AWS_*, GITHUB_TOKEN, SSH_*, cloud and CI tokens ...). --keep-env NAME
(repeatable) keeps only the named variables; --clearenv keeps none. Then --unsetenv
and --setenv apply.

terminal: when stdin and stdout are terminals (or with --tty), the command gets a
terminal of its own: a pty of the sandbox's own devpts, relayed to yours, which is
in raw mode meanwhile and restored on exit. Job control, Ctrl-C, Ctrl-Z, Ctrl-\\
and window size changes work inside as in any shell; your terminal itself never
reaches the command. --no-tty: the command gets your stdio as it is (no job
control; Ctrl-C and Ctrl-Z act on pysandbox). SIGTERM or SIGHUP to pysandbox hang
up the sandbox's terminal (the command gets the signal, and is killed with its
sandbox 2 seconds later if still running).

profiles: --profile FILE|NAME reads a TOML profile (README "Profiles"; shipped: agent,
ci, inspect). Options on the command line win over the profile wherever they stand:
--network, --workdir/--no-workdir, --chdir, --backend and --timeout replace its value;
--ro, --rw, --hide, --tmpfs, --setenv, --unsetenv and --keep-env add to its lists; a
flag (--clearenv, --strict-unix, ...) turns its setting on, never off.

errors: a policy mistake (a missing --chdir, --hide /, ...) is exit 2 and names the
option or the profile's file, line and key; --verbose adds the plan step of a setup
failure and logs the backend choice and the setup's steps with their timings.

network proxy: deny's namespace plus an HTTP/SOCKS5 proxy at 127.0.0.1:3128 (HTTP(S)_PROXY, ALL_PROXY;
NO_PROXY unset) for the --allow-host names only ("*." wildcards); one line at exit sums up the
refusals (pysandbox: proxy refused N connections: HOST:PORT (reason), ...); --verbose prints each.

kernel surface: the built-in seccomp filter refuses keyctl/add_key/request_key (the
caller's session keyring stays out of reach), io_uring (unless --allow-io-uring with
--network allow), perf_event_open, bpf and userfaultfd (EPERM, unless --allow-syscall
NAME: profilers, BPF tools, CRIU) and, with --network deny, sockets of families no
network namespace confines (AF_VSOCK, AF_QIPCRTR, ...).
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's usage error: exit 2, one line, no traceback
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def _get_formatter(self):   # argparse's own, with the width it would ask shutil (and bz2, lzma) for
        return self.formatter_class(prog=self.prog, width=_columns() - 2)


def _columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the terminal's, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run a command confined in Linux namespaces.")
    parser.add_argument("--verbose", "-v", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="{run,status}", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="run a command in a sandbox",
                         usage="%(prog)s [options] -- CMD ...",
                         epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Run CMD in a sandbox: / read-only, the working directory "
                                     "read-write, fresh /proc, minimal /dev, private /tmp, new user, "
                                     "mount, pid, ipc, uts and (network deny) net namespaces.")
    _common_args(run, "deny: a new network namespace with only lo (default); allow: the host network; "
                      "proxy: deny's, plus a proxy for the --allow-host names")
    wd = run.add_mutually_exclusive_group()
    wd.add_argument("--workdir", metavar="PATH",
                    help="directory bound read-write and started in (default: the current directory; "
                         "never /; required when the current directory is $HOME or above it)")
    wd.add_argument("--no-workdir", action="store_true", help="bind no working directory read-write")
    run.add_argument("--rw", metavar="PATH", action="append", default=[],
                     help="bind PATH read-write (repeatable; a symlink is bound where it points now, unless "
                          "inside a writable path; one planted there later fails the launch: symlink_in_path)")
    run.add_argument("--allow-broad-writable", action="store_true",
                     help="allow a writable path (--rw, --workdir) that is /, a system tree, a home directory "
                          "or an ancestor of one (refused by default: writable_path_too_broad)")
    run.add_argument("--follow-writable-symlinks", action="store_true",
                     help="follow a symlink inside a writable path when the policy is built (refused by "
                          "default: symlink_in_path; the sandbox could have planted it)")
    run.add_argument("--ro", metavar="PATH", action="append", default=[],
                     help="bind PATH read-only (repeatable; symlinks as --rw)")
    run.add_argument("--hide", metavar="PATH", action="append", default=[],
                     help="cover PATH with an empty, inaccessible node (repeatable)")
    run.add_argument("--tmpfs", metavar="PATH", action="append", default=[],
                     help="mount a private tmpfs on PATH (repeatable)")
    cli_home.add_arguments(run)
    run.add_argument("--chdir", metavar="PATH", help="directory to start in (default: the workdir, else /)")
    run.add_argument("--setenv", metavar=("NAME", "VALUE"), nargs=2, action="append", default=[],
                     help="set an environment variable (repeatable)")
    run.add_argument("--unsetenv", metavar="NAME", action="append", default=[],
                     help="unset an environment variable (repeatable)")
    run.add_argument("--clearenv", action="store_true",
                     help="start from an empty environment (by default the caller's whole environment, "
                          "secrets such as AWS_* or GITHUB_TOKEN included, reaches the command)")
    run.add_argument("--keep-env", metavar="NAME", action="append", default=None,
                     help="keep only this variable of the caller's environment (repeatable; every other "
                          "one is dropped; then --unsetenv and --setenv apply)")
    term = run.add_mutually_exclusive_group()
    term.add_argument("-t", "--tty", dest="tty", action="store_const", const=True, default=None,
                      help="give the command a terminal of its own (default when stdin and stdout are "
                           "terminals)")
    term.add_argument("-T", "--no-tty", dest="tty", action="store_const", const=False,
                      help="no terminal of its own: the command gets pysandbox's stdio as it is")
    run.add_argument("--share-session", action="store_true",
                     help="keep the caller's session (no setsid): the terminal stays reachable, and the "
                          "command can signal the caller's process group (trusted commands only; "
                          "implies --no-tty)")
    run.add_argument("--keep-authority-sockets", action="store_true",
                     help="network deny: keep docker/podman/containerd, ssh-agent, gpg-agent, D-Bus, "
                          "systemd, udev, snapd, libvirt and LXD sockets and their variables (masked by "
                          "default)")
    cli_seccomp.add_arguments(run)
    run.add_argument("--pass-fd", metavar="FD", type=_fd, action="append", default=[],
                     help="pass descriptor FD (>= 3) to the command (repeatable)")
    run.add_argument("--timeout", metavar="SECONDS", type=_seconds,
                     help="after SECONDS: SIGTERM to the command, SIGKILL to the sandbox 2 s later")
    cli_limits.add_arguments(run)
    cli_workspace.add_arguments(run)
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")

    st = sub.add_parser("status", help="what works here, per backend, capability and network mode",
                        description="Report, per backend, which capabilities and network modes work "
                                    "here and why not. Exit 0 when the policy can run, 1 when not.")
    _common_args(st, "network mode of the policy to check (default: deny)")
    st.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _common_args(parser, network_help: str) -> None:
    """The options ``run`` and ``status`` share."""
    parser.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    parser.add_argument("--profile", metavar="FILE|NAME", help="read the policy from a TOML profile: a file (a path "
                        "with '/' or ending in .toml) or a shipped profile's name (agent, ci, inspect); options given here win")
    parser.add_argument("--backend", choices=("auto", "native", "bwrap"), default=None,
                        help="auto (native where it works, else bwrap; default), native or bwrap")
    parser.add_argument("--network", choices=("deny", "allow", "proxy"), default=None, help=network_help)
    parser.add_argument("--allow-host", action="append", default=[], type=_allow_host, metavar="HOST[:PORT]",
                        help="with --network proxy: a host the proxy lets through (repeatable)")
    cli_protect.add_arguments(parser)


def _fd(text: str) -> int:
    try:
        fd = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a descriptor number: {text!r}") from None
    if fd < 3:
        raise argparse.ArgumentTypeError(f"descriptor must be >= 3 (stdio is always passed): {fd}")
    try:
        os.fstat(fd)
    except OSError:
        raise argparse.ArgumentTypeError(f"descriptor {fd} is not open") from None
    return fd


def _allow_host(text: str) -> str:
    from .proxy.rules import PolicyError, parse_allow_host
    try:
        return parse_allow_host(text) and text
    except PolicyError as exc:
        raise argparse.ArgumentTypeError(exc.args[0]) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"timeout must be a positive number of seconds: {text!r}")
    return value
