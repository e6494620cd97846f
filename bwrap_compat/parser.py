"""bubblewrap 0.11's command line, parsed as bwrap parses it (``parse_args_recurse``).

The result is a :class:`BwrapArgs`: the options, in order where order matters
(filesystem operations, environment and capability edits). Nothing here touches
the kernel except reading the descriptors bwrap itself reads while parsing
(``--args FD``, ``--add-seccomp-fd FD``), through the ``read_fd`` callable.

Errors carry bwrap's own message (without the ``bwrap: `` prefix) in a
:class:`~pysandbox.errors.BwrapArgumentError`; ``.usage`` is set when bwrap would
print its usage text instead.
"""

from __future__ import annotations

import os

from pysandbox.errors import BwrapArgumentError

from . import hostfacts as host
from .args import (ALL_CAPS, CAP_NAMES, MAX_ARGS, MAX_TMPFS_BYTES, OVERLAY_SRC_ORPHAN,  # noqa: F401
                   PERMS_DEFAULT, ULONG_MAX, BwrapArgs, FsOp, usage_error, c_strtol, cap_from_name,
                   parse_int_arg, read_fd_default)
from .checks import check  # noqa: F401  (callers parse, then check)


# Options and the positions (after the option) of their path arguments. An empty one is
# refused at parse time (stricter than bwrap <= 0.11, which resolves "" against its own
# working directory: `--bind-try "" ""` bound the whole host, bubblewrap issue #715).
PATH_ARGS = {
    "--bind": (1, 2), "--bind-try": (1, 2), "--ro-bind": (1, 2), "--ro-bind-try": (1, 2),
    "--dev-bind": (1, 2), "--dev-bind-try": (1, 2), "--bind-fd": (2,), "--ro-bind-fd": (2,),
    "--remount-ro": (1,), "--overlay-src": (1,), "--overlay": (1, 2, 3), "--tmp-overlay": (1,),
    "--ro-overlay": (1,), "--proc": (1,), "--dev": (1,), "--mqueue": (1,), "--dir": (1,), "--tmpfs": (1,),
    "--file": (2,), "--bind-data": (2,), "--ro-bind-data": (2,), "--symlink": (1, 2), "--chmod": (2,),
    "--chdir": (1,), "--lock-file": (1,),
}


def empty_path_message(option: str) -> str:
    return f"Empty path argument to {option} is not allowed"


class _Parser:
    def __init__(self, read_fd, close_fd):
        self.a = BwrapArgs()
        self.read_fd = read_fd
        self.close_fd = close_fd
        self.next_perms = -1
        self.next_size = 0
        self.overlay_srcs: list[str] = []
        self.total = 0

    def die(self, message, usage=False):
        return usage_error(message, usage, self.a.level_prefix)

    def warn_last(self, name):
        self.a.warnings.append(f"Only the last {name} option will take effect")

    def fd_arg(self, text):
        fd = parse_int_arg(text)
        if fd is None:
            raise self.die(f"Invalid fd: {text}")
        return fd

    def load(self, fd, what):
        try:
            data = self.read_fd(fd)
        except OSError as exc:
            raise self.die(f"Can't read {what}: {os.strerror(exc.errno or 0)}") from None
        return data

    def perms_for(self, kind):
        perms = self.next_perms if self.next_perms >= 0 else PERMS_DEFAULT[kind]
        self.next_perms = -1
        return perms

    def overlay_take(self):
        srcs = tuple(self.overlay_srcs)
        self.overlay_srcs = []
        return srcs

    # The loop of parse_args_recurse: returns the index of the first unparsed word.
    def run(self, argv, in_file):
        a = self.a
        if self.total > MAX_ARGS:
            raise self.die(f"Exceeded maximum number of arguments {MAX_ARGS}")
        i, n = 0, len(argv)
        while i < n:
            arg = argv[i]
            left = n - i   # bwrap's argc

            def need(count, message):
                if left < count + 1:
                    raise self.die(message)

            if any(argv[i + k] == "" for k in PATH_ARGS.get(arg, ()) if k < left):
                raise self.die(empty_path_message(arg))

            if arg == "--help":
                a.action = "help"
                return None
            elif arg == "--version":
                a.action = "version"
                return None
            elif arg == "--args":
                if in_file:
                    raise self.die("--args not supported in arguments file")
                need(1, "--args takes an argument")
                fd = self.fd_arg(argv[i + 1])
                data = self.load(fd, "--args data")
                self.close_fd(fd)
                words = data.split(b"\0")
                if words and words[-1] == b"":
                    words.pop()
                for _ in words:
                    self.total += 1
                    if self.total > MAX_ARGS:
                        raise self.die(f"Exceeded maximum number of arguments {MAX_ARGS}")
                inner = [w.decode("utf-8", "surrogateescape") for w in words]
                if self.run(inner, True) is None:
                    return None
                i += 1
            elif arg == "--argv0":
                need(1, "--argv0 takes one argument")
                if a.argv0 is not None:
                    raise self.die("--argv0 used multiple times")
                a.argv0 = argv[i + 1]
                i += 1
            elif arg == "--level-prefix":
                a.level_prefix = True
            elif arg == "--unshare-all":
                a.unshare_user_try = a.unshare_ipc = a.unshare_pid = True
                a.unshare_uts = a.unshare_cgroup_try = a.unshare_net = True
            elif arg.startswith("--unshare-") and arg[10:].replace("-", "_") in (
                    "user", "user_try", "ipc", "pid", "net", "uts", "cgroup", "cgroup_try"):
                setattr(a, arg[2:].replace("-", "_"), True)
            elif arg == "--share-net":
                a.unshare_net = False
            elif arg == "--chdir":
                need(1, "--chdir takes one argument")
                if a.chdir is not None:
                    self.warn_last("--chdir")
                a.chdir = argv[i + 1]
                i += 1
            elif arg == "--disable-userns":
                a.disable_userns = True
            elif arg == "--assert-userns-disabled":
                a.assert_userns_disabled = True
            elif arg == "--remount-ro":
                need(1, "--remount-ro takes one argument")
                a.ops.append(FsOp("--remount-ro", argv[i + 1]))
                i += 1
            elif arg in ("--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try"):
                need(2, f"{arg} takes two arguments")
                a.ops.append(FsOp(arg, argv[i + 2], src=argv[i + 1]))
                i += 2
            elif arg in ("--bind-fd", "--ro-bind-fd"):
                need(2, "--bind-fd takes two arguments")
                fd = self.fd_arg(argv[i + 1])
                a.ops.append(FsOp(arg, argv[i + 2], src=f"/proc/self/fd/{fd}", fd=fd))
                a.consumed_fds.append(fd)
                i += 2
            elif arg == "--overlay-src":
                # bwrap does not check that a source follows; a missing one is caught below.
                if i + 1 < n:
                    self.overlay_srcs.append(argv[i + 1])
                else:
                    self.overlay_srcs.append("")
                i += 1
            elif arg == "--overlay":
                need(3, "--overlay takes three arguments")
                if len(self.overlay_srcs) < 1:
                    raise self.die("--overlay requires at least one --overlay-src")
                a.ops.append(FsOp("--overlay", argv[i + 3], src=argv[i + 1], workdir=argv[i + 2],
                                  overlay_srcs=self.overlay_take()))
                i += 3
            elif arg in ("--tmp-overlay", "--ro-overlay"):
                need(1, f"{arg} takes an argument")
                least = 1 if arg == "--tmp-overlay" else 2
                if len(self.overlay_srcs) < least:
                    raise self.die(f"{arg} requires at least {'one' if least == 1 else 'two'} --overlay-src")
                a.ops.append(FsOp(arg, argv[i + 1], overlay_srcs=self.overlay_take()))
                i += 1
            elif arg in ("--proc", "--dev", "--mqueue", "--dir"):
                need(1, f"{arg} takes an argument")
                perms = self.perms_for(arg) if arg == "--dir" else None
                a.ops.append(FsOp(arg, argv[i + 1], perms=perms))
                i += 1
            elif arg in ("--exec-label", "--file-label"):
                need(1, f"{arg} takes an argument")
                attr = arg[2:].replace("-", "_")
                if getattr(a, attr) is not None:
                    self.warn_last(arg)
                setattr(a, attr, argv[i + 1])
                _die_unless_label_valid(self)
                i += 1
            elif arg == "--tmpfs":
                need(1, "--tmpfs takes an argument")
                perms = self.perms_for(arg)
                size = self.next_size or None
                self.next_size = 0
                a.ops.append(FsOp(arg, argv[i + 1], perms=perms, size=size))
                i += 1
            elif arg in ("--file", "--bind-data", "--ro-bind-data"):
                need(2, f"{arg} takes two arguments")
                fd = self.fd_arg(argv[i + 1])
                a.ops.append(FsOp(arg, argv[i + 2], fd=fd, perms=self.perms_for(arg)))
                a.consumed_fds.append(fd)
                i += 2
            elif arg == "--symlink":
                need(2, "--symlink takes two arguments")
                a.ops.append(FsOp(arg, argv[i + 2], src=argv[i + 1]))
                i += 2
            elif arg == "--lock-file":
                need(1, "--lock-file takes an argument")
                a.lock_files.append(argv[i + 1])
                i += 1
            elif arg in ("--sync-fd", "--block-fd", "--userns-block-fd", "--info-fd", "--json-status-fd",
                         "--userns", "--userns2", "--pidns"):
                need(1, f"{arg} takes an argument")
                attr = arg[2:].replace("-", "_")
                if not attr.endswith("_fd"):
                    attr += "_fd"
                if getattr(a, attr) is not None:
                    self.warn_last(arg)
                setattr(a, attr, self.fd_arg(argv[i + 1]))
                i += 1
            elif arg == "--seccomp":
                need(1, "--seccomp takes an argument")
                if a.seccomp_programs:
                    raise self.die("--seccomp cannot be combined with --add-seccomp-fd")
                if a.seccomp_fd is not None:
                    self.warn_last("--seccomp")
                a.seccomp_fd = self.fd_arg(argv[i + 1])
                i += 1
            elif arg == "--add-seccomp-fd":
                need(1, "--add-seccomp-fd takes an argument")
                if a.seccomp_fd is not None:
                    raise self.die("--add-seccomp-fd cannot be combined with --seccomp")
                fd = self.fd_arg(argv[i + 1])
                a.seccomp_programs.append(_seccomp_data(self, fd))
                i += 1
            elif arg == "--clearenv":
                a.env_ops.append(("clear",))
            elif arg == "--setenv":
                need(2, "--setenv takes two arguments")
                a.env_ops.append(("set", argv[i + 1], argv[i + 2]))
                i += 2
            elif arg == "--unsetenv":
                need(1, "--unsetenv takes an argument")
                a.env_ops.append(("unset", argv[i + 1]))
                i += 1
            elif arg in ("--uid", "--gid"):
                need(1, f"{arg} takes an argument")
                attr = arg[2:]
                if getattr(a, attr) is not None:
                    self.warn_last(arg)
                value = parse_int_arg(argv[i + 1])
                if value is None:
                    raise self.die(f"Invalid {attr}: {argv[i + 1]}")
                setattr(a, attr, value)
                i += 1
            elif arg == "--hostname":
                need(1, "--hostname takes an argument")
                if a.hostname is not None:
                    self.warn_last("--hostname")
                a.hostname = argv[i + 1]
                i += 1
            elif arg in ("--new-session", "--die-with-parent", "--as-pid-1"):
                setattr(a, arg[2:].replace("-", "_"), True)
            elif arg == "--not-a-security-boundary":
                # bwrap 0.12: some setup failures MAY then be warnings. pybwrap accepts it
                # and stays strict (every setup failure is fatal): allowed by its meaning.
                a.not_a_security_boundary = True
            elif arg in ("--cap-add", "--cap-drop"):
                need(1, f"{arg} takes an argument")
                name = argv[i + 1]
                if name.lower() == "all":
                    caps = ALL_CAPS
                else:
                    cap = cap_from_name(name)
                    if cap is None:
                        raise self.die(f"unknown cap: {name}")
                    caps = frozenset({cap})
                a.cap_ops.append((arg[6:], caps))
                i += 1
            elif arg in ("--perms", "--chmod"):
                need(1 if arg == "--perms" else 2, f"{arg} takes {'an argument' if arg == '--perms' else 'two arguments'}")
                if arg == "--perms" and self.next_perms != -1:
                    raise self.die("--perms given twice for the same action")
                text = argv[i + 1]
                perms, rest, _ = c_strtol(text, 8, unsigned=True)
                if text == "" or rest != "" or perms > 0o7777:
                    raise self.die(f"{arg} takes an octal argument <= 07777")
                if arg == "--perms":
                    self.next_perms = perms
                    i += 1
                else:
                    a.ops.append(FsOp("--chmod", argv[i + 2], perms=perms))
                    i += 2
            elif arg == "--size":
                need(1, "--size takes an argument")
                if self.next_size != 0:
                    raise self.die("--size given twice for the same action")
                text = argv[i + 1]
                size, rest, over = c_strtol(text, 0, unsigned=True)
                if over or not text[:1].isdigit() or not text[:1].isascii() or rest != "" or size == 0:
                    raise self.die("--size takes a non-zero number of bytes")
                if size > MAX_TMPFS_BYTES:
                    raise self.die(f"--size (for tmpfs) is limited to {MAX_TMPFS_BYTES}")
                self.next_size = size
                i += 1
            elif arg == "--":
                return i + 1
            elif arg.startswith("-"):
                raise self.die(f"Unknown option {arg}")
            else:
                return i
            if arg not in ("--perms", "--size") and self.next_perms >= 0:
                raise self.die("--perms must be followed by an option that creates a file")
            if arg not in ("--perms", "--size") and self.next_size != 0:
                raise self.die("--size must be followed by --tmpfs")
            if arg != "--overlay-src" and self.overlay_srcs:
                raise self.die(OVERLAY_SRC_ORPHAN)
            i += 1
        return n


def _seccomp_data(parser: _Parser, fd: int) -> bytes:
    data = parser.load(fd, "seccomp data")
    parser.close_fd(fd)
    if len(data) % 8:
        raise parser.die("Invalid seccomp data, must be multiple of 8")
    return data


def _die_unless_label_valid(parser: _Parser) -> None:
    if not host.selinux_enabled():
        raise parser.die("labeling not supported on this system")
    raise parser.die("SELinux labels are not supported by pybwrap (needs native support)")


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def parse(argv, *, read_fd=read_fd_default, close_fd=_close_quietly) -> BwrapArgs:
    """Parse bwrap's arguments (``argv`` without the program name), as bwrap 0.11 does.

    ``--args`` and ``--add-seccomp-fd`` descriptors are read (``read_fd``) and closed
    (``close_fd``) while parsing, as bwrap does; every other descriptor is only recorded.
    The checks bwrap makes in ``main`` after parsing are :func:`check`'s.

    Raises:
        BwrapArgumentError: bwrap would exit 1 with this message (``.usage``: with usage text).
    """
    argv = [os.fsdecode(x) if isinstance(x, (bytes, os.PathLike)) else x for x in argv]
    if any(not isinstance(x, str) for x in argv):
        raise usage_error("arguments must be strings")
    if len(argv) == 1 and argv[0] == "--version":
        return BwrapArgs(action="version")
    if not argv:
        raise usage_error("no command given", usage=True)
    parser = _Parser(read_fd, close_fd)
    parser.total = len(argv)
    try:
        rest = parser.run(argv, False)
        if rest is not None and parser.overlay_srcs:
            raise parser.die(OVERLAY_SRC_ORPHAN)
    except BwrapArgumentError as exc:
        exc.warnings = list(parser.a.warnings)   # printed before the error, as bwrap does
        raise
    args = parser.a
    if rest is not None:
        args.command = argv[rest:]
    return args
