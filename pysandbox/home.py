"""A scratch HOME: ``Policy.default(home="tmpfs")``, ``--home tmpfs``, the ``agent``
profile's default (README "A scratch HOME").

By default the caller's home is seen through the read-only ``/``: ``git config --global``
fails, ``~/.cache`` cannot be made, shell history is lost. ``home="tmpfs"`` mounts a
private, empty, writable tmpfs on it instead (at its canonical path; ``HOME`` keeps the
caller's name, which leads there through the read-only ``/``), and ``home_files`` seeds
it with named entries of the caller's home, each bound read-only at its own name
(``.gitconfig``, ``.config/git``...).

The threat: the command writes what it likes in the tmpfs; it is the sandbox's own memory
and is gone with the sandbox, nothing reaches the host's home. The real home is covered
whole, so the credential stores in it are out of sight without a hide; a seeded entry is
an ordinary read-only bind (a symlink in it resolved now, one inside a writable path
refused: :mod:`pysandbox.writable`), and a credential store below a seeded directory is
still hidden (:mod:`pysandbox.credentials`). Naming a credential store itself
(``home_files=[".aws"]``) shows it, as binding it by its path does.
"""

from __future__ import annotations

import os
import pwd

from .checks import canonical, check_path
from .errors import PolicyError, Reason
from .fs import Bind, Tmpfs
from .pathtree import within

HOME_MODES = ("host", "tmpfs")


def caller_home() -> str:
    """``$HOME``, else the password database's home of the caller."""
    home = os.environ.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = ""
    return home


def scratch_items(home, home_files) -> list[tuple]:
    """``Policy.default``'s ``(path, rank, op)`` entries for ``home``/``home_files``: none
    for ``"host"``; for ``"tmpfs"`` a tmpfs on the caller's home and a read-only bind of
    each named entry into it.

    Raises:
        PolicyError: ``home`` not ``host`` or ``tmpfs``, or ``home_files`` without
            ``tmpfs`` (``invalid_value``, ``conflicting_options``); no home to cover (unset,
            ``/``, not a directory) or a bad entry name (absolute, ``..``, missing:
            ``invalid_path``, ``bind_source_missing``).
    """
    if home not in HOME_MODES:
        raise PolicyError(f"home must be one of {', '.join(HOME_MODES)}: {home!r}", Reason.INVALID_VALUE, home,
                          field="home")
    names = [home_files] if isinstance(home_files, (str, os.PathLike)) else list(home_files or ())
    if home == "host":
        if names:
            raise PolicyError("home_files seed a scratch home: they need home='tmpfs'",
                              Reason.CONFLICTING_OPTIONS, names, field="home_files")
        return []
    given = caller_home()
    top = canonical(check_path(given, "home", field="home")) if given.startswith("/") else ""
    if top in ("", "/") or not os.path.isdir(top):
        raise PolicyError(f"home='tmpfs' needs a home directory to cover: HOME is {given!r}",
                          Reason.INVALID_PATH, given, field="home")
    items: list[tuple] = [(top, 1, Tmpfs(top))]
    for name in names:
        text = os.fspath(name) if isinstance(name, os.PathLike) else name
        if not isinstance(text, str) or not text or text.startswith("/") or ".." in text.split("/"):
            raise PolicyError(f"home_files entry must be a name inside the home (.gitconfig, .config/git): "
                              f"{name!r}", Reason.INVALID_PATH, name, field="home_files")
        dest = check_path(f"{top}/{text}", "home_files entry", field="home_files")
        src = f"{given.rstrip('/')}/{text}"
        if not os.path.lexists(src):
            raise PolicyError(f"home_files entry does not exist: {src}", Reason.BIND_SOURCE_MISSING, src,
                              field="home_files")
        items.append((dest, 0, Bind(src, dest, readonly=True)))
    return items


def visible_hides(hides: tuple, items: list[tuple]) -> tuple:
    """``hides`` without those the scratch home covers already (a hide there would put an
    unreadable node in the command's own writable home); one below a seeded entry stays."""
    if not items:
        return hides
    top = items[0][0]
    seeded = [path for path, _, _ in items[1:]]
    return tuple(h for h in hides if not within(h.path, top) or any(within(h.path, s) for s in seeded))
