"""The checks bwrap's ``main`` makes after parsing, in bwrap's order, and the user
namespace it implies (always for non-root); reads only files (no namespace is made)."""

from __future__ import annotations

import os

from . import hostfacts as host
from .args import BwrapArgs, usage_error


def check(args: BwrapArgs, real_uid: int | None = None, real_gid: int | None = None,
          userns_try: bool | None = None) -> BwrapArgs:
    """The checks of bwrap's ``main`` after parsing, in bwrap's order; fills in the user
    namespace bwrap implies (always for non-root) and the default uid/gid.

    Raises:
        BwrapArgumentError: bwrap would exit 1 with this message (``.usage``: usage text).
    """
    real_uid = os.getuid() if real_uid is None else real_uid
    real_gid = os.getgid() if real_gid is None else real_gid

    def die(message, usage=False):
        return usage_error(message, usage, args.level_prefix)

    if args.userns_block_fd is not None and not args.unshare_user:
        raise die("--userns-block-fd requires --unshare-user")
    if args.userns_block_fd is not None and args.info_fd is None:
        raise die("--userns-block-fd requires --info-fd")
    if args.userns_fd is not None and args.unshare_user:
        raise die("--userns not compatible --unshare-user")
    if args.userns_fd is not None and args.unshare_user_try:
        raise die("--userns not compatible --unshare-user-try")
    if args.disable_userns and not args.unshare_user:
        raise die("--disable-userns requires --unshare-user")
    if args.disable_userns and args.userns_block_fd is not None:
        raise die("--disable-userns is not compatible with  --userns-block-fd")
    if real_uid != 0 and args.userns_fd is None:
        args.unshare_user = True
    if args.unshare_user_try:
        if userns_try is None:
            userns_try = host.userns_try_available()
        if userns_try:
            args.unshare_user = True
    if not args.command:
        raise die("no command given", usage=True)
    if args.uid is None:
        args.uid = real_uid
    if args.gid is None:
        args.gid = real_gid
    if not args.unshare_user and args.userns_fd is None and args.uid != real_uid:
        raise die("Specifying --uid requires --unshare-user or --userns")
    if not args.unshare_user and args.userns_fd is None and args.gid != real_gid:
        raise die("Specifying --gid requires --unshare-user or --userns")
    if not args.unshare_uts and args.hostname is not None:
        raise die("Specifying --hostname requires --unshare-uts")
    if args.as_pid_1 and not args.unshare_pid:
        raise die("Specifying --as-pid-1 requires --unshare-pid")
    if args.as_pid_1 and args.lock_files:
        raise die("Specifying --as-pid-1 and --lock-file is not permitted")
    return args
