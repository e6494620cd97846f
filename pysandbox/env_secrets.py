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

from _collections_abc import Iterable, Mapping   # collections.abc: the same classes, after importing collections (issue 28)

SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL")
SECRET_NAME = "|".join(SECRET_WORDS)   # searched case-insensitively (re.I)
# scheme://user:password@ (a password, even empty after the colon, is a credential)
URL_WITH_PASSWORD = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@"
_patterns: list = []   # both compiled, on the first name or value only they can decide


def _compiled():
    if not _patterns:
        import re   # here: a launch whose environment is plain ASCII names and no URL skips it (issue 28)
        _patterns[:] = [re.compile(SECRET_NAME, re.I), re.compile(URL_WITH_PASSWORD)]
    return _patterns


def is_secret(name: str, value: str) -> bool:
    """True for a variable :mod:`this module <pysandbox.env_secrets>` keeps from the command.

    The patterns' answer, without them where the answer is plain: an ASCII name is
    matched by its upper case (re.I's folding differs only beyond ASCII: the Kelvin
    sign, the long s), and a value with no ``://`` or no ``@`` cannot match the URL."""
    if name.isascii():
        upper = name.upper()
        if any(word in upper for word in SECRET_WORDS):
            return True
    elif _compiled()[0].search(name):
        return True
    if "://" not in value or "@" not in value:
        return False
    return bool(_compiled()[1].match(value))


def secret_names(environ: Mapping[str, str], named: Iterable[str] = ()) -> list[str]:
    """The names of ``environ`` the default policy drops, less those the caller ``named``,
    sorted (for ``status`` and the docs)."""
    keep = set(named)
    return sorted(n for n, v in environ.items() if n not in keep and is_secret(n, v))
