"""Profiles: a policy written as a TOML file (stdlib ``tomllib``), for ``pysandbox run
--profile FILE|NAME`` and :meth:`pysandbox.Policy.from_toml`.

A profile's keys are the command line's options (``--keep-authority-sockets`` is
``keep_authority_sockets``), every one optional::

    description = "what this profile is for"      # shown by nothing; for the reader
    network = "deny"                               # or "allow", or "proxy":
    allow_hosts = ["pypi.org", "*.npmjs.org:443"]  # what the proxy lets through (network "proxy")
    workdir = "."                                  # a path ("." = the current directory,
                                                   # "~" expanded), or false: none
    ro = ["/opt/data"]                             # host paths bound read-only
    rw = ["~/.cache/tool"]                         # host paths bound read-write
    hide = ["~/.ssh", "~/.aws"]                    # covered with an empty, inaccessible node
    tmpfs = ["/var/tmp"]                           # private tmpfs mounts
    chdir = "/some/dir"                            # start directory in the sandbox ("." = the
                                                   # current directory)
    home = "tmpfs"                                 # a private, empty, writable HOME (home.py)
    home_files = [".gitconfig"]                    # seeded into it read-only
    share_session = false                          # keep the caller's session (no setsid)
    keep_authority_sockets = false
    hide_credentials = true                        # false: show ~/.ssh, ~/.aws, ... (credentials.py)
    protect_git = true                             # false: a writable .git (gitmeta.py)
    strict_unix = false
    allow_io_uring = false                         # needs network = "allow"
    allow_syscalls = ["userfaultfd"]               # of perf_event_open, bpf, userfaultfd
                                                   # (refused by default), those allowed
    hostname = "sandbox"
    uid = 1000                                     # ids inside the sandbox
    gid = 1000
    caps_keep = ["net_bind_service"]
    allow_nested_userns = false
    allow_broad_writable = false                   # writable /, system trees, homes (README)
    follow_writable_symlinks = false               # follow symlinks inside writable paths

    [env]                                          # applied as --keep-env/--clearenv,
    keep = ["PATH", "HOME", "LANG", "TERM"]       # then unset, then set
    clear = false
    unset = ["PYTHONPATH"]
    set = { LC_ALL = "C.UTF-8" }

    [limits]                                       # resource limits (pysandbox/limits.py)
    memory = "512M"                                # the whole sandbox (a cgroup)
    pids = 256                                     # processes and threads (a cgroup)
    cpu_time = 60                                  # CPU seconds per process (RLIMIT_CPU)
    wall_time = 600                                # seconds, then the sandbox is killed
    file_size = "1G"                               # largest file written (RLIMIT_FSIZE)
    open_files = 1024                              # descriptors per process (RLIMIT_NOFILE)

    [run]                                          # launch settings: the CLI's, not the Policy's
    backend = "auto"
    timeout = 600                                  # seconds

A profile inside a path its own policy makes writable is refused (a command run under
it could rewrite it for the next run), and so is one named through such a path (a
symlink there to a profile outside could be re-pointed by the command). Errors are
:class:`~pysandbox.errors.PolicyError` naming the file, the line and the key
(``agent.toml:7: ro: bind source does not exist: /opt/data``); an unknown key is an
error with a "did you mean". A name without ``/`` and without ``.toml`` is a profile
shipped in ``pysandbox/profiles/`` (:func:`shipped`).

Imported only when a profile is used; ``difflib`` only for an error's "did you mean".
"""

from __future__ import annotations

import os
import re
import tomllib

from .errors import PolicyError, Reason
from .records import dataclass, field

__all__ = ["Profile", "load", "shipped"]

_PATHS = ("ro", "rw", "hide", "tmpfs")
_FLAGS = ("share_session", "keep_authority_sockets", "strict_unix", "allow_io_uring", "allow_nested_userns",
          "allow_broad_writable", "follow_writable_symlinks")
# key -> what its value must be (the words of the error message). Not here: pass_fds (a
# descriptor number means nothing outside the process that opened it) and the seccomp
# programs (bytes); --pass-fd and the Python API give those.
_TOP = {
    "description": "a string", "network": "a string", "workdir": "a path or false",
    **{k: "a list of paths" for k in _PATHS}, "chdir": "a path or .",
    **{k: "true or false" for k in _FLAGS}, "hostname": "a string", "uid": "an integer",
    "gid": "an integer", "caps_keep": "a list of capability names", "env": "a table", "run": "a table",
    "limits": "a table",
    "allow_hosts": "a list of host names (HOST[:PORT])",
    "allow_syscalls": "a list of system call names",
    "hide_credentials": "true or false",
    "protect_git": "true or false",
    "home": "a string", "home_files": "a list of names",
}
_ENV = {"clear": "true or false", "keep": "a list of names", "unset": "a list of names",
        "set": "a table of name = \"value\""}
_RUN = {"backend": "a string", "timeout": "a number of seconds"}
_LIMITS = {"memory": "a size", "pids": "an integer", "cpu_time": "an integer", "wall_time": "a number of seconds",
           "file_size": "a size", "open_files": "an integer"}
_TABLES = {"": _TOP, "env": _ENV, "run": _RUN, "limits": _LIMITS}


# The shipped profiles: package data next to this module (pyproject's package-data).
SHIPPED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")


def shipped() -> list[str]:
    """The names of the profiles shipped with pysandbox (``--profile NAME``)."""
    try:
        return sorted(name[:-5] for name in os.listdir(SHIPPED_DIR) if name.endswith(".toml"))
    except OSError:
        return []


def _close(word: str, choices) -> list[str]:
    import difflib   # only for an error's "did you mean"
    return difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)


@dataclass
class Profile:
    """A loaded, checked profile. ``values`` maps ``"key"``, ``"env.key"`` and
    ``"run.key"`` to the file's values (paths expanded); :meth:`line` finds a key's line."""

    path: str
    text: str
    values: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)    # the same keys, as written in the file
    file: str | None = None                    # the file's real path on the host
    named: str | None = None                   # the file's path as named, absolute

    def check_outside(self, policy) -> None:
        """Refuse a policy that can write its own profile, or the way to it: a command run
        under it could rewrite the file (``network = "allow"``, ``rw = ["~"]``), or re-point
        a symlink the profile is named through, for the next run. The path as named is
        walked component by component (symlinks followed, the target included).

        Raises:
            PolicyError: ``conflicting_options``, naming the file and the writable path.
        """
        if self.file is None:
            return
        from .writable import passes_through
        tops = [os.path.realpath(path) for path in policy.writable_host_paths]
        for path in dict.fromkeys((self.named or self.file, self.file)):
            top = passes_through(path, tops)
            if top is not None:
                where = "inside" if path == self.file else "named through"
                raise PolicyError(f"profile {self.path}: {where} {top}, which the policy it describes makes "
                                  "writable: a command run under it could rewrite its own profile (or re-point "
                                  "the way to it) for the next run; keep the profile, and the path you name it "
                                  "by, outside the writable paths", Reason.CONFLICTING_OPTIONS,
                                  self.path, field="profile")

    def line(self, key: str) -> int | None:
        """The line (1-based) where ``key`` (``"ro"``, ``"env.set"``...) is set, or None."""
        return _key_line(self.text, key)

    def where(self, key: str) -> str:
        """``FILE:LINE: key`` for messages."""
        line = self.line(key)
        return f"{self.path}:{line}: {key}" if line else f"{self.path}: {key}"

    def error(self, key: str, message: str, reason=Reason.INVALID_VALUE, value=None) -> PolicyError:
        return PolicyError(f"{self.where(key)}: {message}", reason, value, field=key)

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def policy_kwargs(self, env_cls) -> dict:
        """Arguments for ``Policy.default`` from this profile (the env as an ``env_cls``,
        :class:`pysandbox.policy.Env`; ``workdir`` only when the profile names one or says
        false: None). The classes come from the caller: this module never imports
        ``policy`` (which imports it)."""
        kw: dict = {}
        if "workdir" in self.values:
            kw["workdir"] = self.values["workdir"]
        for key in ("network", "allow_hosts", *_PATHS, "chdir", "home", "home_files", "hostname", "uid", "gid", "keep_authority_sockets",
                    "strict_unix", "allow_io_uring", "allow_nested_userns", "allow_broad_writable",
                    "follow_writable_symlinks"):
            if key in self.values:
                kw[key] = self.values[key]
        for key in ("hide_credentials", "protect_git"):
            if key in self.values:
                kw[key] = self.values[key]
        if "caps_keep" in self.values:
            kw["caps_keep"] = frozenset(self.values["caps_keep"])
        if "allow_syscalls" in self.values:
            kw["allow_syscalls"] = tuple(self.values["allow_syscalls"])
        if "share_session" in self.values:
            kw["new_session"] = not self.values["share_session"]
        env = {k[4:]: v for k, v in self.values.items() if k.startswith("env.")}
        if env:
            try:
                kw["env"] = env_cls(clear=env.get("clear", False), set=tuple(env.get("set", {}).items()),
                                unset=tuple(env.get("unset", ())), keep=env.get("keep"))
            except PolicyError as exc:
                raise self.error(_env_key(exc, env), exc.args[0], exc.reason, exc.value) from None
        limits = {k[7:]: v for k, v in self.values.items() if k.startswith("limits.")}
        if limits:
            from .limits import Limits
            try:
                kw["limits"] = Limits(**limits)
            except PolicyError as exc:
                raise self.error(f"limits.{exc.field}", exc.args[0], exc.reason, exc.value) from None
        return kw

    def policy(self, policy_cls, env_cls, **overrides):
        """The Policy this profile describes (``policy_cls.default`` with its keys, then
        ``overrides``).

        Raises:
            PolicyError: a value the policy refuses, naming the file, line and key.
        """
        kw = self.policy_kwargs(env_cls)
        kw.update(overrides)
        try:
            policy = policy_cls.default(**kw)
        except PolicyError as exc:
            raise self.locate(exc) from None
        self.check_outside(policy)
        return policy

    def locate(self, exc: PolicyError) -> PolicyError:
        """``exc`` (from a policy built with this profile's values) naming the key it came from."""
        key = self.key_for(exc)
        if key is None:
            return PolicyError(f"{self.path}: {exc.args[0]}", exc.reason, exc.value, field=exc.field)
        return self.error(key, exc.args[0], exc.reason, exc.value)

    def key_for(self, exc: PolicyError) -> str | None:
        """The key an error's field or value came from, if this profile set it."""
        if exc.field in self.values:
            return exc.field
        for key, value in self.values.items():
            if exc.value is not None and (value == exc.value or
                                          isinstance(value, (list, tuple)) and exc.value in value):
                return key
        return None


def load(name_or_path) -> Profile:
    """Read and check a profile: a file path, or the name of a shipped one.

    Raises:
        PolicyError: a missing file or unknown name, TOML syntax, an unknown key (with a
            "did you mean"), or a value of the wrong type; each names the file and line.
    """
    path = os.fspath(name_or_path)
    if "/" not in path and not path.endswith(".toml"):   # a name, never a file of the current directory
        file = os.path.join(SHIPPED_DIR, f"{path}.toml")
        if not os.path.isfile(file):
            hint = _close(path, shipped())
            raise PolicyError(f"no profile named {path!r} (shipped: {', '.join(shipped())})"
                              + (f"; did you mean {hint[0]!r}?" if hint else "")
                              + "; a file path needs a '/' or the .toml suffix", Reason.INVALID_VALUE, path,
                              field="profile")
        shown = f"{path} ({file})"
    else:
        file = shown = path
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read profile {shown}: {getattr(exc, 'strerror', None) or exc}",
                          Reason.INVALID_VALUE, path, field="profile") from None
    real = os.path.realpath(file)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{shown}: {exc}", Reason.INVALID_VALUE, path, field="profile") from None
    profile = Profile(shown, text, file=real, named=os.path.abspath(file))
    _check(profile, doc)
    return profile


def _check(profile: Profile, doc: dict) -> None:
    for key, value in doc.items():
        if key not in _TOP:
            raise _unknown(profile, "", key)
        if key in ("env", "run", "limits"):
            if not isinstance(value, dict):
                raise profile.error(key, f"must be {_TOP[key]} ([{key}])")
            for sub, subvalue in value.items():
                if sub not in _TABLES[key]:
                    raise _unknown(profile, key, sub)
                profile.raw[f"{key}.{sub}"] = subvalue
                profile.values[f"{key}.{sub}"] = _value(profile, f"{key}.{sub}", _TABLES[key][sub], subvalue)
            continue
        profile.raw[key] = value
        profile.values[key] = _value(profile, key, _TOP[key], value)


def _unknown(profile: Profile, table: str, key: str) -> PolicyError:
    known = list(_TABLES[table])
    if table == "":
        known += [f"{t}.{k}" for t in ("env", "run", "limits") for k in _TABLES[t]]
    close = _close(key, known)
    full = f"{table}.{key}" if table else key
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(_TABLES[table])})"
    return profile.error(full, f"unknown key {full!r}{hint}", Reason.INVALID_VALUE, key)


def _value(profile: Profile, key: str, kind: str, value):
    bad = profile.error(key, f"must be {kind}, not {value!r}", Reason.INVALID_VALUE, value)
    if kind == "true or false":
        if not isinstance(value, bool):
            raise bad
    elif kind == "a string":
        if not isinstance(value, str):
            raise bad
    elif kind == "an integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
    elif kind == "a number of seconds":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise profile.error(key, f"must be a positive number of seconds, not {value!r}",
                                Reason.INVALID_VALUE, value)
    elif kind == "a path or .":
        if not isinstance(value, str):
            raise bad
        value = _expand(value)
        if value == "." or value.startswith("./"):
            value = os.path.abspath(value)   # the current directory (it is in the sandbox's view of /)
    elif kind == "a path or false":
        if value is False:
            return None
        if not isinstance(value, str):
            raise bad
        value = os.path.abspath(_expand(value))   # "." and relative paths: the current directory
    elif kind.startswith("a list of"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
        if kind == "a list of paths":
            value = [_expand(v) for v in value]
    elif kind == "a size":   # bytes, or a string such as "512M" (pysandbox/limits.py parse_size)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise bad
    elif kind.startswith("a table of"):
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise bad
    return value


def _expand(path: str) -> str:
    """``~`` and ``~/...`` are the caller's home; anything else is taken as written
    (the policy refuses a relative path)."""
    return os.path.expanduser(path) if path.startswith("~") else path


def _env_key(exc: PolicyError, env: dict) -> str:
    """The ``[env]`` key an Env error came from (its value, or the conflict's)."""
    for sub in ("set", "unset", "keep"):
        value = env.get(sub)
        if value is None or exc.value is None:
            continue
        names = list(value)   # a table: its names
        if exc.value in names or exc.value == tuple(names) or (sub == "set" and exc.value in value.values()):
            return f"env.{sub}"
    return "env.keep" if exc.reason == Reason.CONFLICTING_OPTIONS else "env"


_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"' -]+?)\s*\]\s*(#.*)?$")


def _key_line(text: str, key: str) -> int | None:
    """The line of ``key`` (``"ro"``, ``"env.set"``) in a TOML text: a line ``key =`` in
    its table (or ``table.key =`` at the top, or ``table = {`` inline), found by a scan
    (``tomllib`` keeps no positions)."""
    table, _, leaf = key.rpartition(".")
    current = ""
    name = re.escape(leaf)
    own = re.compile(rf"^\s*(?:{name}|\"{name}\"|'{name}')\s*=")
    dotted = re.compile(rf"^\s*{re.escape(table)}\s*\.\s*{name}\s*=") if table else None
    inline = re.compile(rf"^\s*{re.escape(table)}\s*=") if table else None
    fallback = None
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1).strip().strip("\"'")
            if table and current == table and fallback is None:
                fallback = number
            continue
        if current == table and own.match(line):
            return number
        if current == "" and dotted is not None and inline is not None and \
                (dotted.match(line) or (inline.match(line) and fallback is None)):
            if dotted.match(line):
                return number
            fallback = number
    return fallback
