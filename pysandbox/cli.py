"""The ``pysandbox`` command line: ``pysandbox run`` and ``pysandbox status``.

Exit status of ``pysandbox run``: the command's own; 128+N when it was killed by
signal N; 125 when the sandbox could not be set up (the command never ran; one line
on stderr names the reason code); 126 command not executable; 127 command not found;
2 usage error. ``pysandbox status`` exits 0 when the policy can run, 1 when not.
"""

from __future__ import annotations

import os
import _signal as signal   # signal.py builds its IntEnums with enum: a launch needs ints (issue 28)
import sys

from . import cli_fast, cli_home, cli_limits, cli_protect, cli_proxy, cli_seccomp, cli_workspace
from .cli_errors import EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_SETUP, EXIT_USAGE, PROG, start_failed, write_line  # noqa: F401
from .lifecycle import KILL_GRACE, exit_status, stop
from .writable import home_directories
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE = KILL_GRACE   # --timeout: seconds between SIGTERM to the command and SIGKILL to the sandbox


def build_parser():
    """The argparse parser of both subcommands (cli_parser.py; imported only when used)."""
    from .cli_parser import build_parser
    return build_parser()


def _say(message: str) -> None:
    write_line(f"{PROG}: " + " ".join(str(message).split()))   # a path's own bytes, not \udcff


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pysandbox`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    args = cli_fast.run_args(argv)   # `run -- CMD ...`: argparse's namespace, without argparse
    if args is None:
        parser = build_parser()
        args = parser.parse_args(argv)
    else:
        parser = cli_fast.Deferred(build_parser)
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
    from .direct import DirectProcess   # SandboxProcess's launch without subprocess (issue 28)
    from .trace import clock, ms
    started_at = clock()
    try:
        proc = DirectProcess(command, policy=policy, backend=args.backend, pass_fds=tuple(args.pass_fd))
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
    code = proc.wait_for(args.timeout)
    if code is None:
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
