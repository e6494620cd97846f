"""The ``pysandbox`` command line: ``pysandbox run`` and ``pysandbox status``.

Exit status of ``pysandbox run``: the command's own; 128+N when it was killed by
signal N; 125 when the sandbox could not be set up (the command never ran; one line
on stderr names the reason code); 126 command not executable; 127 command not found;
2 usage error. ``pysandbox status`` exits 0 when the policy can run, 1 when not.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from . import __version__, cli_home, cli_limits, cli_protect, cli_proxy, cli_seccomp, cli_workspace
from .cli_errors import EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_SETUP, EXIT_USAGE, start_failed, write_line  # noqa: F401
from .lifecycle import KILL_GRACE, exit_status, stop
from .writable import home_directories
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE = KILL_GRACE   # --timeout: seconds between SIGTERM to the command and SIGKILL to the sandbox
PROG = "pysandbox"
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


def _say(message: str) -> None:
    write_line(f"{PROG}: " + " ".join(str(message).split()))   # a path's own bytes, not \udcff


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pysandbox`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cli_proxy.setup_logging(args.verbose)   # --verbose: every record; else warnings, the proxy's summed up
    from .errors import PolicyError, SandboxError
    profile = None
    try:
        if args.profile is not None:
            from .profile import load
            try:
                profile = load(args.profile)
            except PolicyError as exc:   # a key's error names the file, line and key: never an option
                if exc.field == "profile":
                    raise
                _say(f"{exc.reason.value}: {exc.args[0]}")
                return EXIT_USAGE
        if args.cmd == "status":
            return _status(args, profile)
        return cli_workspace.finished(args, lambda: _run(parser, args, profile))
    except PolicyError as exc:
        from .cli_errors import describe
        _say(describe(exc, args, profile))
        return EXIT_USAGE
    except SandboxError as exc:
        from .cli_errors import without_step
        _say(exc if args.verbose else without_step(str(exc)))
        return EXIT_SETUP


def _policy(args, profile=None):
    """The policy of ``pysandbox run``: the profile's keys (if any), then the command line's
    options over them (README "Profiles": scalars replace, lists extend, flags turn on)."""
    from .policy import Env, Policy
    kw = profile.policy_kwargs(Env) if profile is not None else {}
    if args.no_workdir:
        kw["workdir"] = None
    elif args.workdir is not None:
        kw["workdir"] = args.workdir
    elif profile is None or "workdir" not in kw:
        kw["workdir"] = _default_workdir()
    elif profile.raw.get("workdir") == ".":
        kw["workdir"] = _default_workdir()   # "." is the default workdir, with its home-directory check
    kw["workdir"] = cli_workspace.workdir(args, kw.get("workdir"))
    if args.network is not None:
        kw["network"] = args.network
    for name in ("ro", "rw", "hide", "tmpfs", "allow_hosts"):
        kw[name] = list(kw.get(name, ())) + list(getattr(args, name if name != "allow_hosts" else "allow_host"))
    if args.chdir is not None:
        kw["chdir"] = args.chdir
    cli_home.merge(kw, args)
    env = kw.get("env", Env())
    keep = env.keep
    if args.keep_env is not None:
        keep = tuple(keep or ()) + tuple(args.keep_env)
    pairs = {**dict(env.set), **{name: value for name, value in args.setenv}}   # the command line's win
    kw["env"] = Env(clear=env.clear or args.clearenv, set=tuple(pairs.items()),
                    unset=tuple(env.unset) + tuple(args.unsetenv), keep=keep)
    if args.share_session:
        kw["new_session"] = False
    kw["pass_fds"] = tuple(args.pass_fd)
    kw["limits"] = cli_limits.merged(kw.get("limits"), args)
    for flag in ("keep_authority_sockets", "allow_broad_writable", "follow_writable_symlinks"):
        if getattr(args, flag):
            kw[flag] = True
    cli_seccomp.merge(kw, args)
    cli_protect.merge(kw, args)   # the profile's, or off
    policy = Policy.default(**kw)
    if profile is not None:
        profile.check_outside(policy)
    return policy


def _default_workdir() -> str:
    """The current directory as the default workdir, unless it is ``/`` (Policy.default
    refuses it) or a home directory or one of its ancestors: binding that read-write
    hands the command every dotfile, key and token below it.

    Raises:
        PolicyError: ``workdir_too_broad``.
    """
    from .errors import PolicyError, Reason
    cwd = os.getcwd()
    real = os.path.realpath(cwd)
    if real == "/":
        return cwd    # Policy.default refuses it, with its own message
    for home in sorted(home_directories()):
        if home != "/" and (real == home or home.startswith(real.rstrip("/") + "/")):
            what = "your home directory" if real == home else f"an ancestor of your home directory {home}"
            raise PolicyError(f"the current directory {cwd} is {what}: binding it read-write would give the "
                              "command everything below it; pass --workdir DIR (--workdir ~ "
                              "--allow-broad-writable if you mean it) or --no-workdir",
                              Reason.WORKDIR_TOO_BROAD, cwd)
    return cwd


def _launch_settings(args, profile) -> None:
    """``--backend`` and ``--timeout``: the command line's, else the profile's ``[run]``."""
    if args.backend is None:
        backend = profile.get("run.backend", "auto") if profile is not None else "auto"
        if backend not in ("auto", "native", "bwrap"):
            raise profile.error("run.backend", f"must be auto, native or bwrap, not {backend!r}")
        args.backend = backend
    if getattr(args, "timeout", None) is None and profile is not None:
        args.timeout = profile.get("run.timeout")


def _run(parser, args, profile=None) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("run needs a command after --")
    _launch_settings(args, profile)
    policy = _policy(args, profile)
    shared = args.share_session or not policy.new_session   # the option, or the profile's
    if args.tty and shared:
        parser.error("--tty gives the command a session and terminal of its own; --share-session keeps "
                     "yours: choose one")
    if args.tty or args.tty is None and not shared and os.isatty(0) and os.isatty(1):
        return _run_in_terminal(args, command, policy)
    # Handlers go in before the launch: a signal that arrives while the sandbox starts is
    # delivered to it as soon as it exists.
    started: list = []
    pending: list = []

    def forward(signum, _frame):
        if not started:
            pending.append(signum)
            return
        started[0].forward_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        return _launch_and_wait(args, command, policy, started, pending)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _launch_and_wait(args, command, policy, started, pending) -> int:
    from .process import Popen, TimeoutExpired
    from .trace import clock, ms
    started_at = clock()
    try:
        proc = Popen(command, policy=policy, backend=args.backend, pass_fds=tuple(args.pass_fd))
    except OSError as exc:
        return start_failed(command, exc, _say)
    started.append(proc)
    if args.verbose:
        import logging
        logging.getLogger("pysandbox").info("pysandbox: backend %s (pid %d), started in %.1f ms (compile, check, "
                                            "setup until the command's exec)", proc.backend_name, proc.pid,
                                            ms(started_at))
    for sig in pending:
        proc.forward_signal(sig)
    try:
        code = proc.wait(timeout=args.timeout)
    except TimeoutExpired:
        _say(f"timeout: {args.timeout:g} seconds passed; SIGTERM to the command, "
             f"SIGKILL to the sandbox {GRACE:g} seconds later")
        code = stop(proc, GRACE)
    cli_limits.report(proc)
    cli_proxy.report(proc)
    cli_seccomp.report(proc)
    return exit_status(code)


def _run_in_terminal(args, command, policy) -> int:
    from .terminal import run_in_terminal
    procs: list = []

    def started(proc):
        procs.append(proc)
        if args.verbose:
            import logging
            logging.getLogger("pysandbox").info("pysandbox: backend %s (pid %d), terminal of its own",
                                                proc.backend_name, proc.pid)

    def timed_out():
        _say(f"timeout: {args.timeout:g} seconds passed; the terminal hung up, SIGTERM to the command, "
             f"SIGKILL to the sandbox {GRACE:g} seconds later")
    try:
        code = run_in_terminal(command, policy=policy, backend=args.backend, pass_fds=tuple(args.pass_fd),
                               timeout=args.timeout, on_start=started, on_timeout=timed_out, grace=GRACE)
    except OSError as exc:
        return start_failed(command, exc, _say)
    cli_limits.report(*procs)
    cli_proxy.report(*procs)
    cli_seccomp.report(*procs)
    return exit_status(code)


def _status(args, profile=None) -> int:
    from .policy import Env, Policy
    from .status import status
    _launch_settings(args, profile)
    creds = cli_protect.overrides(args)   # a flag turns a protection off, never on
    if profile is not None:
        kw = ({"network": args.network} if args.network is not None else {}) | creds
        if args.allow_host:
            kw["allow_hosts"] = list(profile.get("allow_hosts", ())) + args.allow_host
        if profile.raw.get("workdir") == ".":
            kw["workdir"] = _default_workdir()
        policy = profile.policy(Policy, Env, **kw)
    else:
        policy = Policy.default(network=args.network or "deny", allow_hosts=args.allow_host, **creds)
    st = status(policy, backend=args.backend)
    if args.verbose:
        import logging
        logging.getLogger("pysandbox").info("pysandbox: backend %s", st.backend)
    from .status_text import emit, format_status
    if args.json:
        import json
        emit(json.dumps(st.to_dict(), indent=2, sort_keys=True))
    else:
        emit(format_status(st))
    return 0 if st.available else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
