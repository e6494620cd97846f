"""Secrets in the environment: the variables ``Policy.default`` keeps from the command
unless the caller names them (``hide_credentials``, the same switch as the credential
stores of :mod:`pysandbox.credentials`).

An agent's process usually holds its own keys in its environment (``OPENAI_API_KEY``,
``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ...), and every sandboxed command
inherits the caller's environment, as with ``subprocess``. A command that can read a
key can send it wherever the network lets it, or leave it in the workdir for a later
step to publish. So the default policy drops, from the environment it starts from:

- every variable whose name holds one of :data:`SECRET_WORDS`, case-insensitive (the
  rule Codex's shell environment policy applies by default, widened to passwords and
  credentials);
- every variable whose value is a URL carrying a password (``scheme://user:pass@host``,
  e.g. ``DATABASE_URL``, a proxy URL with credentials).

What the caller names wins: a name in ``Env(keep=...)``/``--keep-env`` or set by
``Env(set=...)``/``--setenv`` reaches the command. ``hide_credentials=False``
(``--no-hide-credentials``) passes the whole environment. Not covered: a secret under
a name without those words, or in a value that is not such a URL (a cookie file's
path is a path, and the file is the credential stores' business).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL")
_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.I)
# scheme://user:password@ (a password, even empty after the colon, is a credential)
_URL_WITH_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@")


def is_secret(name: str, value: str) -> bool:
    """True for a variable :mod:`this module <pysandbox.env_secrets>` keeps from the command."""
    return bool(_SECRET_NAME.search(name) or _URL_WITH_PASSWORD.match(value))


def secret_names(environ: Mapping[str, str], named: Iterable[str] = ()) -> list[str]:
    """The names of ``environ`` the default policy drops, less those the caller ``named``,
    sorted (for ``status`` and the docs)."""
    keep = set(named)
    return sorted(n for n, v in environ.items() if n not in keep and is_secret(n, v))
