"""The command line's seccomp options (pysandbox/seccomp.py): ``--strict-unix``,
``--allow-io-uring``, ``--allow-syscall NAME`` and ``--report-denials`` of ``pysandbox run``,
and how they go over a profile's keys (a flag turns its setting on, never off; names add to
the list); the denials' summary line at exit (pysandbox/denials.py)."""

from __future__ import annotations

import sys


def add_arguments(parser) -> None:
    parser.add_argument("--strict-unix", action="store_true",
                        help="refuse new AF_UNIX sockets by seccomp (socketpair still works)")
    parser.add_argument("--allow-io-uring", action="store_true",
                        help="allow io_uring (refused by default with ENOSYS); needs --network allow and "
                             "no --strict-unix, since io_uring makes sockets seccomp cannot see")
    parser.add_argument("--allow-syscall", metavar="NAME", action="append", default=[],
                        help="let NAME reach the kernel: perf_event_open, bpf or userfaultfd (refused by "
                             "default with EPERM; repeatable; for profilers, BPF tools, CRIU)")
    parser.add_argument("--report-denials", action="store_true",
                        help="at exit, print one line on stderr naming what the sandbox refused: writes "
                             "outside the writable paths, connections off loopback, system calls the "
                             "filter refuses (pysandbox: denied: write /etc/hosts (EROFS) x2; ...)")


def merge(kw: dict, args) -> None:
    """The options over ``kw`` (``Policy.default`` arguments, perhaps a profile's)."""
    for flag in ("strict_unix", "allow_io_uring", "report_denials"):
        if getattr(args, flag):
            kw[flag] = True
    if args.allow_syscall:
        kw["allow_syscalls"] = (*kw.get("allow_syscalls", ()), *args.allow_syscall)


def report(*procs) -> None:
    """The denials' summary line on stderr for each finished sandbox that refused anything."""
    denials = [getattr(proc, "denials", None) for proc in procs]
    if not any(denials):
        return
    from .denials import summary   # only when there is something to say
    for found in denials:
        line = summary(found or ())
        if line:
            print(line, file=sys.stderr, flush=True)
