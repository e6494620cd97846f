"""The command's environment: :class:`Env`, the edits a policy makes to the caller's
environment at launch (importable from :mod:`pysandbox.policy` and :mod:`pysandbox`)."""

from __future__ import annotations

import os
from _collections_abc import Mapping   # collections.abc: the same classes, after importing collections (issue 28)

from .checks import as_tuple, set_field, validated
from .errors import PolicyError, Reason
from .records import dataclass


@validated
@dataclass(frozen=True)
class Env:
    """Environment operations, applied to the caller's environment at launch:
    start from it (or from nothing if ``clear``, or from only the ``keep`` names it
    has, if ``keep`` is given), then unset, then set.

    ``drop_secrets``: leave out the variables that look like secrets (``*KEY*``,
    ``*TOKEN*``, ``*SECRET*``, passwords, URLs with a password: :mod:`pysandbox.env_secrets`)
    unless ``keep`` or ``set`` names them. ``Policy.default`` turns it on (with
    ``hide_credentials``); a bare ``Env()`` passes the caller's whole environment, and
    ``keep`` is the allow-list that stops that.

    Raises:
        PolicyError: a bad name or value (``invalid_value``); ``keep`` with ``clear``
            (``conflicting_options``: keep already drops everything else).
    """

    clear: bool = False
    set: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()
    keep: tuple[str, ...] | None = None
    drop_secrets: bool = False

    def __post_init__(self):
        if not isinstance(self.drop_secrets, bool):
            raise PolicyError("drop_secrets must be a bool", Reason.INVALID_VALUE, self.drop_secrets)
        pairs = tuple(self.set.items()) if isinstance(self.set, Mapping) else as_tuple(self.set, "environment set")
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise PolicyError(f"environment entry must be (name, value): {pair!r}", Reason.INVALID_VALUE, pair)
            name, value = pair
            _check_env_name(name)
            if not isinstance(value, str) or "\x00" in value:
                raise PolicyError(f"environment value must be a string without NUL: {value!r}",
                                  Reason.INVALID_VALUE, value)
        for name in as_tuple(self.unset, "environment unset"):
            _check_env_name(name)
        set_field(self, "set", pairs)
        set_field(self, "unset", tuple(self.unset))
        if not isinstance(self.clear, bool):
            raise PolicyError("clear must be a bool", Reason.INVALID_VALUE, self.clear)
        if self.keep is not None:
            if isinstance(self.keep, str):
                raise PolicyError("keep must be a collection of names, not one string",
                                  Reason.INVALID_VALUE, self.keep)
            keep = as_tuple(self.keep, "environment keep")
            for name in keep:
                _check_env_name(name)
            if self.clear:
                raise PolicyError("environment keep already drops every other variable: do not also clear",
                                  Reason.CONFLICTING_OPTIONS, keep)
            set_field(self, "keep", tuple(dict.fromkeys(keep)))

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        if self.clear:
            env = {}
        elif self.keep is not None:
            env = {name: base[name] for name in self.keep if name in base}
        elif self.drop_secrets:
            from .env_secrets import is_secret
            env = {name: value for name, value in base.items() if not is_secret(name, value)}
        else:
            env = dict(base)
        for name in self.unset:
            env.pop(name, None)
        for name, value in self.set:
            env[name] = value
        return env


class EnvCache:
    """One launcher's environments: ``Env.apply`` on the caller's ``os.environ`` is
    reused while os.environ and the ``Env`` are unchanged (os.environ compared by its
    underlying bytes mapping: one C-level dict comparison a launch, instead of decoding
    and testing every variable again). A session keeps one; one-shot launches share one.
    :meth:`keyed` also names the result: a session's encoded environment is reused while
    the name is the same (pysandbox/session_proto.py ``EnvEncoder``), with no second
    comparison."""

    def __init__(self):
        self._entry = None   # (Env, os.environ's bytes mapping copied, the result)

    def apply(self, ops: Env, env=None) -> dict[str, str]:
        """A new dict: ``ops`` applied to ``env`` (None: os.environ; a mapping of str or
        bytes, decoded as os does)."""
        return self.keyed(ops, env)[0]

    def keyed(self, ops: Env, env=None) -> tuple[dict[str, str], object | None]:
        """:meth:`apply`'s dict and its key: an object that is the same (``is``) exactly
        while the result is the one reused (os.environ and ``ops`` unchanged); None when
        nothing is reused (``env`` given, or an os.environ without its bytes mapping)."""
        if env is not None:
            return ops.apply({os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}), None
        data = getattr(os.environ, "_data", None)
        entry = self._entry
        if data is not None and entry is not None and (entry[0] is ops or entry[0] == ops) and entry[1] == data:
            return dict(entry[2]), entry
        applied = ops.apply(os.environ)
        if data is None:
            return applied, None
        self._entry = entry = (ops, dict(data), dict(applied))
        return applied, entry


def _check_env_name(name):
    # What the regex ^[^=\x00]+$ matched, without compiling one for every launch.
    if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
        raise PolicyError(f"environment name must be non-empty, without '=' or NUL: {name!r}",
                          Reason.INVALID_VALUE, name)
