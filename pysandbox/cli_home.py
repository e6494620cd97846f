"""``--home`` and ``--home-file`` of ``pysandbox run`` (pysandbox/home.py; README "A
scratch HOME"), merged over a profile's ``home`` and ``home_files`` as the other
options are: the command line's ``--home`` replaces, ``--home-file`` adds."""

from __future__ import annotations


def add_arguments(run) -> None:
    run.add_argument("--home", choices=("host", "tmpfs"), default=None,
                     help="host: the caller's home, read-only (default); tmpfs: a private, empty, writable "
                          "HOME that vanishes with the sandbox")
    run.add_argument("--home-file", metavar="NAME", action="append", default=[],
                     help="with --home tmpfs: seed it read-only with this entry of your home (.gitconfig; "
                          "repeatable)")


def merge(kw: dict, args) -> None:
    if args.home is not None:
        kw["home"] = args.home
    kw["home_files"] = list(kw.get("home_files", ())) + args.home_file
