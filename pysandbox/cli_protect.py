"""The command line's switches for what the default policy protects on the caller's
behalf: the credential stores and secret variables (``--no-hide-credentials``:
credentials.py, env_secrets.py) and the writable paths' git metadata
(``--writable-git``: gitmeta.py). Each flag only turns its protection off; a profile
may too, and neither can turn it back on."""

from __future__ import annotations


def add_arguments(parser) -> None:
    """``run``'s and ``status``'s protection switches."""
    parser.add_argument("--no-hide-credentials", dest="hide_credentials", action="store_false", help="show the "
                        "credential stores hidden by default (~/.ssh, ~/.aws, ~/.netrc, ...; /etc/shadow for root; "
                        "pysandbox/credentials.py) and pass the variables that look like secrets (*KEY*, *TOKEN*, "
                        "...); to show just one store, bind it (ro or rw) by its path instead")
    parser.add_argument("--writable-git", dest="protect_git", action="store_false", help="let the command write "
                        "the .git of the workdir and of the rw paths (read-only by default: a change there runs "
                        "on the host at its next git command; pysandbox/gitmeta.py)")


def merge(kw: dict, args) -> None:
    """Fold the flags into ``Policy.default``'s keywords ``kw`` (a profile's, if any)."""
    kw["hide_credentials"] = kw.get("hide_credentials", True) and args.hide_credentials
    kw["protect_git"] = kw.get("protect_git", True) and args.protect_git


def overrides(args) -> dict:
    """The keywords the flags add for ``status`` (only what they turn off)."""
    return ({} if args.hide_credentials else {"hide_credentials": False}) | \
        ({} if args.protect_git else {"protect_git": False})
