"""What a policy makes writable, and the two rules that follow from it (README.md,
"Writable paths"; THREAT_MODEL.md rows "symlinks in paths" and "writable paths").

A host path the sandbox can write belongs to the command: what it leaves there (a
symlink, a file) is the attacker's by the time the next policy is built. So, when a
:class:`~pysandbox.policy.Policy` is built:

- **too broad** (``writable_path_too_broad``): no writable host path (a read-write bind
  source, the workdir, an overlay's upper and work directories) is the root, a system
  tree (:data:`SYSTEM_TREES`), a home directory (:func:`home_directories`, every home of
  the password database, ``/root``) or an ancestor of one (``/home``), unless the policy
  says ``allow_broad_writable=True``. A directory below one (``~/project``,
  ``/var/tmp/x``, ``/opt/tool/cache``) is fine.
- **symlinks** (``symlink_in_path``): every host path the policy names (bind and overlay
  sources as named, and the host path behind every destination, hide, tmpfs and the
  start directory) is resolved one component at a time; a symlink met inside a writable
  host path is refused, not followed, unless the policy says
  ``follow_writable_symlinks=True``. Symlinks elsewhere (``/var/run -> /run``) are the
  host's and are followed, as before.

Host facts are ``readlink`` of each component and the password database; nothing else.
"""

from __future__ import annotations

import os

from .errors import PolicyError, Reason
from .pathtree import within

__all__ = ["SYSTEM_TREES", "check_policy", "home_directories", "passes_through", "too_broad", "writable_sources"]

# Writable, each hands the command the host: the programs and libraries root runs, its
# configuration, its state, its devices and kernel interfaces, every user's files. The
# top-level trees of the FHS and the standard directories right below /usr and /var.
# Compared with a path's canonical form (/lib -> usr/lib is /usr/lib). Not here: /tmp
# (shared, but nothing of the system's; the sandbox has a private one by default).
SYSTEM_TREES = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
    "/nix", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/usr", "/var",
    "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32", "/usr/libexec",
    "/usr/include", "/usr/share", "/usr/src", "/usr/local", "/usr/local/bin", "/usr/local/lib",
    "/var/lib", "/var/log", "/var/cache", "/var/spool", "/var/mail", "/var/tmp", "/var/backups",
    "/var/opt", "/var/local", "/var/www", "/run/user",
})
_MAX_LINKS = 40   # the kernel's ELOOP limit


def home_directories() -> set[str]:
    """The caller's home directories, canonical: ``$HOME`` and the password database's entry."""
    import pwd
    candidates = [os.environ.get("HOME")]
    try:
        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return {os.path.realpath(home) for home in candidates if home and home.startswith("/")}


_DATABASE_HOMES: dict = {}   # (the database's key) -> its homes, canonical: one entry


def _database_homes() -> frozenset[str]:
    """The homes of every password database entry, canonical; read again when
    /etc/passwd changes (realpath of each is most of the cost of a policy's check)."""
    import pwd
    try:
        st = os.stat("/etc/passwd")
        key = (st.st_ino, st.st_mtime_ns, st.st_size, pwd.getpwall)
    except OSError:
        key = (None, pwd.getpwall)
    if key not in _DATABASE_HOMES:
        try:
            entries = pwd.getpwall()
        except OSError:   # pragma: no cover - an unreadable database: the caller's homes only
            entries = []
        _DATABASE_HOMES.clear()
        dirs = {e.pw_dir for e in entries if e.pw_dir.startswith("/")}   # many entries share one
        _DATABASE_HOMES[key] = frozenset(os.path.realpath(d) for d in dirs)
    return _DATABASE_HOMES[key]


def _all_homes() -> set[str]:
    """Every home directory the host knows: the caller's, each password database entry's, /root."""
    homes = home_directories() | _database_homes() | {"/root"}
    homes.discard("/")   # the root is refused on its own
    return homes


def too_broad(path: str, homes=None) -> str | None:
    """Why ``path`` (canonical) is too broad to be writable ("the root", "a system tree",
    ...), or None when it is not. ``homes``: the home directories (default: every one
    the host knows)."""
    if path == "/":
        return "the root"
    if path in SYSTEM_TREES:
        return "a system tree"
    below = path.rstrip("/") + "/"
    for home in sorted(_all_homes() if homes is None else homes):
        if home == path:
            return "a home directory"
        if home.startswith(below):
            return f"an ancestor of the home directory {home}"
    return None


def _walk(path: str):
    """Each component of the absolute ``path`` as the kernel resolves it: yields
    ``(candidate, is_link)``, the candidate being the resolved parent joined with the
    next name; a symlink's target is walked in its place. Stops after 40 symlinks (the
    launch then fails on its own)."""
    pending = [part for part in reversed(path.split("/")) if part]
    current, links = "/", 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            target = os.readlink(candidate)
        except OSError:   # not a symlink, or missing: a missing tail is kept as named
            target = None
        yield candidate, target is not None
        if target is None:
            current = candidate
            continue
        links += 1
        if links > _MAX_LINKS:
            return
        if target.startswith("/"):
            current = "/"
        pending.extend(part for part in reversed(target.split("/")) if part)


def _inside(path: str, tops) -> str | None:
    """The first of ``tops`` that ``path`` is or lies inside, or None."""
    return next((top for top in tops if within(path, top)), None)


def passes_through(path: str, tops) -> str | None:
    """The first of ``tops`` that the absolute ``path`` passes through on its way to what
    it names (any component as resolved, the target included), or None."""
    for candidate, _ in _walk(path):
        top = _inside(candidate, tops)
        if top is not None:
            return top
    return None


def writable_sources(policy) -> tuple[str, ...]:
    """The host paths ``policy`` lets the sandbox write: read-write bind sources (the
    workdir among them) and writable overlays' upper and work directories (canonical)."""
    from .fs import Bind, Overlay
    paths = []
    for op in policy.fs:
        if isinstance(op, Bind) and op.src is not None and not op.readonly:
            paths.append(op.src)
        elif isinstance(op, Overlay) and op.writable:
            paths += [op.upper, op.work]
    return tuple(dict.fromkeys(paths))


def check_policy(policy) -> None:
    """Refuse a policy that makes a too-broad host path writable, or names a host path
    through a symlink inside a path it makes writable (module docstring); each unless
    its opt-in is set.

    Raises:
        PolicyError: ``writable_path_too_broad`` (value: the canonical path);
            ``symlink_in_path`` (value: the path as the policy named it).
    """
    writable = writable_sources(policy)
    if not writable:
        return
    if not policy.allow_broad_writable:
        homes = _all_homes()
        for path in writable:
            why = too_broad(path, homes)
            if why is not None:
                raise PolicyError(f"writable path {path} is {why}: the command could rewrite what the host or "
                                  "its users rely on; name a directory below it (allow_broad_writable=True, "
                                  "--allow-broad-writable, if you mean it)", Reason.WRITABLE_PATH_TOO_BROAD, path)
    if not policy.follow_writable_symlinks:
        for named, host in _named_paths(policy):
            _refuse_symlinks(named, host, writable)


def _named_paths(policy):
    """``(as named, host path to walk)`` for every host path ``policy`` names: bind and
    overlay sources as the caller gave them, and the host path behind each destination
    and the start directory (through the operations before it)."""
    from . import view
    from .fs import Bind, Overlay, fs_dest
    fs = policy.fs
    indexed = view.View(fs)   # one index: each destination is looked up among the ops before it
    for i, op in enumerate(fs):
        if isinstance(op, Bind) and op.src is not None:
            named = getattr(op, "named_src", op.src)
            yield named, named
        elif isinstance(op, Overlay):
            for named in getattr(op, "named_sources", op.sources):
                yield named, named
        dest = fs_dest(op)
        host, _ = view.host_path(dest, indexed, limit=i)
        if host is not None:
            yield dest, host
    if policy.chdir is not None:
        host, _ = view.host_path(policy.chdir, indexed)
        if host is not None:
            yield policy.chdir, host


def _refuse_symlinks(named: str, host: str, writable) -> None:
    for candidate, is_link in _walk(host):
        top = _inside(candidate, writable) if is_link else None
        if top is not None:
            raise PolicyError(f"{named}: {candidate} is a symlink inside {top}, which this policy makes writable: "
                              "whatever wrote it chose where it leads; name the target itself "
                              "(follow_writable_symlinks=True, --follow-writable-symlinks, to follow it)",
                              Reason.SYMLINK_IN_PATH, named)
