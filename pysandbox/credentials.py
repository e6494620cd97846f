"""Well-known credential stores: files and directories whose contents log in, sign or
publish as the caller (keys, tokens, password stores, the host's password hashes).

The read-only ``/`` of the default policy would show them to every command, and a
command that can read a key can send it anywhere the network lets it (or leave it in
the workdir for the next step). ``Policy.default`` hides the stores listed here that
exist when the policy is built (a :class:`~pysandbox.fs.Hide` each: a directory gets an
empty inaccessible tmpfs, a file an empty unreadable file; a hide that cannot be made
fails the launch), unless ``hide_credentials=False`` (``--no-hide-credentials``,
profile key ``hide_credentials = false``).

Coverage, exactly:

- :data:`HOME_STORES` below each of the caller's home directories (:func:`homes`:
  ``$HOME``, the password database's home of the caller's uid, and for a root caller
  run through sudo the home of ``SUDO_USER`` too); the ``.config/``, ``.local/share/``
  and ``.cache/`` entries also below ``$XDG_CONFIG_HOME``, ``$XDG_DATA_HOME`` and
  ``$XDG_CACHE_HOME`` when those name another directory;
- the stores the tools' own variables name (:data:`ENV_STORES`, e.g. ``GNUPGHOME``,
  ``KUBECONFIG``, ``AWS_SHARED_CREDENTIALS_FILE``);
- for a root caller (effective uid 0: uid 0 in the sandbox is the host's root, and the
  host's root can read these without any capability) :data:`SYSTEM_STORES`.

Each is taken as the host resolves its symlinks when the policy is built (a symlinked
``~/.ssh`` is hidden where it points). Paths the caller names win: a store that *is*
the workdir, an ``ro``/``rw`` bind or a ``tmpfs`` of the policy is not hidden (naming a
store is how one is un-hidden: ``--ro ~/.kube/config``); a store that *contains* a
named path is not hidden whole: its other entries are, down to the named path; a store
*inside* a named path stays hidden (``--rw ~`` still hides ``~/.ssh``).

Not covered: ``/root`` as a whole (root's interpreters and toolchains live there:
pyenv, rustup, cargo, nvm; only its credential stores are hidden, as in any home),
stores elsewhere (a project's ``.env``, a key copied into the workdir, other users'
homes, which a sandbox's uid 0 without capabilities cannot read where their owners
keep them private), shell histories, stores created after the policy was built, hard
links to a store under another name. Secrets in the environment are
:mod:`pysandbox.env_secrets`' business (the same switch). ``pybwrap`` (bwrap's own
semantics) hides nothing of this.
"""

from __future__ import annotations

import os
import stat
from _collections_abc import Iterable, Mapping   # collections.abc: the same classes, after importing collections (issue 28)

from .errors import PolicyError, Reason
from .fs import Bind, Hide, Tmpfs
from .pathtree import below as _under
from .records import dataclass

__all__ = ["ENV_STORES", "HOME_STORES", "SYSTEM_STORES", "CredentialStore", "candidates", "coverage",
           "default_hides", "hides", "homes", "matching", "present"]

# Relative to each home directory: what each names (kind) and the store.
HOME_STORES = (
    # keys and agents' configuration
    ("ssh", ".ssh"), ("gpg", ".gnupg"),
    # cloud and cluster credentials
    ("aws", ".aws"), ("azure", ".azure"), ("gcloud", ".config/gcloud"), ("oci", ".oci"),
    ("kubernetes", ".kube"), ("docker", ".docker"), ("containers", ".config/containers/auth.json"),
    ("terraform", ".terraform.d/credentials.tfrc.json"), ("vault", ".vault-token"),
    ("s3cmd", ".s3cfg"), ("boto", ".boto"), ("rclone", ".config/rclone/rclone.conf"),
    # git hosting
    ("git", ".git-credentials"), ("git", ".config/git/credentials"), ("github", ".config/gh"),
    ("github", ".config/hub"), ("gitlab", ".config/glab-cli"),
    # package registries and logins
    ("netrc", ".netrc"), ("pypi", ".pypirc"), ("npm", ".npmrc"), ("cargo", ".cargo/credentials"),
    ("cargo", ".cargo/credentials.toml"), ("rubygems", ".gem/credentials"),
    ("composer", ".composer/auth.json"), ("composer", ".config/composer/auth.json"),
    ("maven", ".m2/settings-security.xml"), ("huggingface", ".cache/huggingface/token"),
    # databases
    ("postgres", ".pgpass"), ("mysql", ".my.cnf"),
    # password stores, keyrings and browser profiles (cookies, saved passwords)
    ("pass", ".password-store"), ("keyring", ".local/share/keyrings"), ("kwallet", ".local/share/kwalletd"),
    ("browser", ".mozilla"), ("browser", ".config/google-chrome"), ("browser", ".config/chromium"),
)

# Where a tool's variable moves its store: (variable, kind, name below it, or "" for the
# value itself). KUBECONFIG is a list (":"). Relative values are ignored.
ENV_STORES = (
    ("GNUPGHOME", "gpg", ""), ("PASSWORD_STORE_DIR", "pass", ""),
    ("AWS_SHARED_CREDENTIALS_FILE", "aws", ""), ("AWS_CONFIG_FILE", "aws", ""),
    ("KUBECONFIG", "kubernetes", ""), ("DOCKER_CONFIG", "docker", ""), ("REGISTRY_AUTH_FILE", "containers", ""),
    ("CLOUDSDK_CONFIG", "gcloud", ""), ("AZURE_CONFIG_DIR", "azure", ""), ("GH_CONFIG_DIR", "github", ""),
    ("CARGO_HOME", "cargo", "credentials"), ("CARGO_HOME", "cargo", "credentials.toml"),
    ("NPM_CONFIG_USERCONFIG", "npm", ""), ("NETRC", "netrc", ""), ("PGPASSFILE", "postgres", ""),
)

# A root caller's: the host's password hashes and the host's own private keys.
SYSTEM_STORES = (
    ("shadow", "/etc/shadow"), ("shadow", "/etc/shadow-"), ("shadow", "/etc/gshadow"),
    ("shadow", "/etc/gshadow-"), ("shadow", "/etc/security/opasswd"),
    ("host-key", "/etc/ssh/ssh_host_*_key"), ("host-key", "/etc/ssl/private"),
    ("host-key", "/etc/pki/tls/private"), ("kerberos", "/etc/krb5.keytab"),
    ("network", "/etc/NetworkManager/system-connections"), ("network", "/etc/wireguard"),
    ("network", "/etc/ipsec.secrets"), ("host-key", "/etc/letsencrypt"),
)

_XDG = (("XDG_CONFIG_HOME", ".config/"), ("XDG_DATA_HOME", ".local/share/"), ("XDG_CACHE_HOME", ".cache/"))

OPT_OUT = ("--no-hide-credentials, Policy.default(hide_credentials=False) or hide_credentials = false in a "
           "profile; one store: name it (--ro/--rw PATH); one variable: --setenv NAME VALUE")


@dataclass(frozen=True)
class CredentialStore:
    """One known credential store: ``path`` (as named; :func:`present` gives it
    resolved), ``kind`` (ssh, gpg, aws, shadow, ...) and ``source`` (``"HOME"``,
    ``"password database"``, ``"SUDO_USER"``, an XDG or tool variable, or ``"root caller"``)."""

    path: str
    kind: str
    source: str


def homes(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The caller's home directories as ``(path, source)``: ``$HOME``, the password
    database's home of the real uid, and for a root caller the home of ``SUDO_USER``."""
    import pwd
    env = os.environ if environ is None else environ
    found = [(env.get("HOME") or "", "HOME")]
    try:
        found.append((pwd.getpwuid(os.getuid()).pw_dir, "password database"))
    except KeyError:
        pass
    if os.geteuid() == 0 and env.get("SUDO_USER"):
        try:
            found.append((pwd.getpwnam(env["SUDO_USER"]).pw_dir, "SUDO_USER"))
        except KeyError:
            pass
    out, seen = [], set()
    for path, source in found:
        if path.startswith("/") and path != "/" and path not in seen:
            seen.add(path)
            out.append((path, source))
    return out


def candidates(environ: Mapping[str, str] | None = None) -> list[CredentialStore]:
    """Every store pysandbox knows for this caller, existing or not, in a stable order
    (:data:`SYSTEM_STORES` globs expanded)."""
    return [CredentialStore(*entry) for entry in _candidates(os.environ if environ is None else environ)]


def _candidates(env: Mapping[str, str]):
    """``(path, kind, source)`` of each candidate (no records: most do not exist)."""
    for home, source in homes(env):
        for kind, rel in HOME_STORES:
            yield f"{home}/{rel}", kind, source
    for var, prefix in _XDG:
        base = env.get(var, "")
        if base.startswith("/") and base != "/":
            for kind, rel in HOME_STORES:
                if rel.startswith(prefix):
                    yield f"{base.rstrip('/')}/{rel[len(prefix):]}", kind, var
    for var, kind, name in ENV_STORES:
        for value in env.get(var, "").split(":") if var == "KUBECONFIG" else [env.get(var, "")]:
            if value.startswith("/") and value.strip("/"):
                yield (f"{value.rstrip('/')}/{name}" if name else value), kind, var
    if os.geteuid() == 0:
        for kind, path in SYSTEM_STORES:
            for one in matching(path) if "*" in path else [path]:
                yield one, kind, "root caller"


def matching(pattern: str) -> list[str]:
    """``sorted(glob.glob(pattern))`` for the form :data:`SYSTEM_STORES` uses: one ``*`` in
    the last component (``/etc/ssh/ssh_host_*_key``), without importing glob and fnmatch
    into every root launch. As glob: a name starting with "." only when the pattern's does."""
    folder, _, name = pattern.rpartition("/")
    head, star, tail = name.partition("*")
    if not star or "*" in tail or any(c in pattern for c in "?[") or "*" in folder:
        raise ValueError(f"not a one-star pattern: {pattern!r}")
    try:
        entries = os.listdir(folder or "/")
    except OSError:
        return []
    return sorted(f"{folder}/{e}" for e in entries
                  if len(e) >= len(head) + len(tail) and e.startswith(head) and e.endswith(tail)
                  and (head.startswith(".") or not e.startswith(".")))


def present(environ: Mapping[str, str] | None = None) -> list[CredentialStore]:
    """The candidates that exist now, one entry per resolved path (``path`` with its
    symlinks resolved, as the host has them)."""
    seen: set = set()
    out = []
    parents: dict = {}   # realpath of a present store's parent, asked once (most share the home)
    for path, kind, source in _candidates(os.environ if environ is None else environ):
        try:
            st = os.lstat(path)   # most are missing: one system call each
            real, st = _resolved(path, st, parents)
        except (OSError, ValueError):
            continue
        if real in seen or real == "/":
            continue
        if not (os.access(real, os.R_OK) or (stat.S_ISDIR(st.st_mode) and os.access(real, os.X_OK))):
            # The caller cannot read it, so neither can its sandbox (the uid 0 of an
            # unprivileged user namespace, `unshare -r`, sees /etc/ssl/private so, and
            # may not mount over it): nothing to hide, and no hide to fail.
            continue
        seen.add(real)
        out.append(CredentialStore(real, kind, source))
    return out


def _resolved(path: str, st, parents: dict):
    """``(os.path.realpath(path), os.lstat(real))`` given ``st = os.lstat(path)``: for a
    path in normal form whose last component is not a symlink, the real path is its
    parent's real path (``parents``: a cache) joined with that name, and ``st`` is
    already that file's lstat; otherwise both are asked of the host."""
    parent, _, name = path.rpartition("/")
    if stat.S_ISLNK(st.st_mode) or not parent or name in ("", ".", "..") or os.path.normpath(path) != path:
        real = os.path.realpath(path)
        return real, os.lstat(real)
    top = parents.get(parent)
    if top is None:
        top = parents[parent] = os.path.realpath(parent)
    return (top.rstrip("/") + "/" + name), st


def hides(named: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> list[str]:
    """The paths ``Policy.default`` hides: each present store, except what ``named``
    (the policy's workdir, binds and tmpfs mounts) makes visible: a store that is a
    named path is skipped, one that contains a named path is replaced by its other
    entries, down to the named path. Parents come before children; a path below
    another one hidden is left out (already hidden).

    Raises:
        PolicyError: ``conflicting_options``: a store that contains a named path cannot
            be listed, or one of its entries is a symlink to a directory that holds a
            named path (it cannot be hidden without hiding what the caller named).
    """
    wanted = {os.path.realpath(p) for p in named}
    out: list[str] = []
    for store in present(environ):
        out.extend(_around(store.path, wanted))
    kept: list[str] = []
    for path in sorted(set(out), key=lambda p: (p.count("/"), p)):
        if not any(_under(path, top) for top in kept):
            kept.append(path)
    return kept


def default_hides(items: Iterable[tuple], hide_credentials=True) -> tuple:
    """``Policy.default``'s credential hides (:class:`~pysandbox.fs.Hide` each), to go after
    its other operations: ``items`` are its ``(path, rank, op)`` entries (rank 0 a bind,
    1 a tmpfs: the named paths; 2 a hide). Empty when ``hide_credentials`` is False.

    Raises:
        PolicyError: ``hide_credentials`` not a bool (``invalid_value``); see :func:`hides`.
    """
    if not isinstance(hide_credentials, bool):
        raise PolicyError("hide_credentials must be a bool", Reason.INVALID_VALUE, hide_credentials,
                          field="hide_credentials")
    if not hide_credentials:
        return ()
    items = list(items)
    covered = {op.path for _, rank, op in items if rank == 2}
    return tuple(Hide(path) for path in hides([path for path, rank, _ in items if rank < 2]) if path not in covered)


def _around(path: str, named: set) -> list[str]:
    """``path`` hidden, or, where named paths lie below it, its other entries."""
    if path in named:
        return []
    if not any(_under(n, path) for n in named):
        return [path]
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise PolicyError(f"cannot hide the credential store {path} around the path named inside it "
                          f"({exc.strerror}): name the store itself, or pass hide_credentials=False "
                          "(--no-hide-credentials)", Reason.CONFLICTING_OPTIONS, path) from None
    out = []
    for name in entries:
        child = f"{path.rstrip('/')}/{name}"
        try:
            is_link = stat.S_ISLNK(os.lstat(child).st_mode)
        except OSError:
            continue   # gone: nothing to hide
        if is_link:
            # A symlink is hidden where it points (a hide never mounts on a symlink).
            target = os.path.realpath(child)
            if target == "/" or target in named or any(_under(n, target) for n in named):
                raise PolicyError(f"cannot hide {child} in the credential store {path}: it leads to {target}, "
                                  "which is or holds a path the policy names; name the store itself, or pass "
                                  "hide_credentials=False (--no-hide-credentials)",
                                  Reason.CONFLICTING_OPTIONS, child)
            if os.path.lexists(target):
                out.append(target)
            continue
        out.extend(_around(child, named))
    return out


def _shown(store: str, policy) -> bool:
    """Whether the last of the policy's mounts covering ``store`` is a host bind (the
    read-only ``/``, a bind of it or above it), not a tmpfs."""
    last = None
    for op in policy.fs:
        if isinstance(op, Tmpfs) and (op.dest == store or _under(store, op.dest)):
            last = op
        elif isinstance(op, Bind) and op.src is not None and (op.dest == store or _under(store, op.dest)):
            last = op
    return not isinstance(last, Tmpfs)


def coverage(policy, environ: Mapping[str, str] | None = None) -> dict:
    """What the policy does about credential stores, for ``status`` and audits:
    ``hidden`` (the policy's hides that cover a present store or part of one),
    ``readable`` (present stores no hide covers, in whole or in part), ``opt_out``
    and ``scope`` (one honest sentence)."""
    stores = [s.path for s in present(environ)]
    hidden_paths = [op.path for op in policy.fs if isinstance(op, Hide)]
    hidden = [h for h in hidden_paths if any(h == s or _under(h, s) or _under(s, h) for s in stores)]
    # a tmpfs over a store (a scratch HOME, home.py) hides it whole, unless a later bind shows it again
    covers = [op.dest for op in policy.fs if isinstance(op, Tmpfs) and any(_under(s, op.dest) for s in stores)
              and any(not _shown(s, policy) for s in stores if _under(s, op.dest))]
    hidden += covers
    readable = [s for s in stores if _shown(s, policy)
                and not any(h == s or _under(h, s) or _under(s, h) for h in hidden_paths)]
    if hidden:
        scope = ("the well-known credential stores (ssh and gpg keys, cloud, cluster, registry and git-hosting "
                 "tokens, password stores and keyrings; /etc/shadow and host keys for a root caller) that "
                 "existed when the policy was built are hidden, except what the policy names; any other "
                 "secret the caller can read (a project's .env, a key elsewhere) is readable")
    else:
        scope = ("no credential store is hidden by this policy (Policy.default hides the well-known ones "
                 "unless hide_credentials=False): every store listed as readable can be read by the command")
    env = getattr(policy, "env", None)
    if getattr(env, "drop_secrets", False) and not env.clear and env.keep is None:
        from .env_secrets import secret_names
        dropped = secret_names(os.environ if environ is None else environ, (name for name, _ in env.set))
    else:
        dropped = []
    return {"hidden": hidden, "readable": readable, "opt_out": OPT_OUT, "scope": scope,
            "env_dropped": dropped, "env_drops_secrets": bool(getattr(env, "drop_secrets", False))}
