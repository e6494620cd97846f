"""Secrets in the environment (pysandbox/env_secrets.py): the default policy leaves out
variables that look like keys, tokens and passwords, and what the caller names wins.
The launch itself is attacked in tests/security/test_credentials.py."""

from __future__ import annotations

import pytest

from pysandbox import Policy
from pysandbox.env_secrets import is_secret, secret_names
from pysandbox.errors import PolicyError
from pysandbox.policy import Env

HOST = {
    "OPENAI_API_KEY": "sk-1", "GITHUB_TOKEN": "ghp_1", "AWS_SECRET_ACCESS_KEY": "a", "AWS_ACCESS_KEY_ID": "b",
    "PGPASSWORD": "pw", "GPG_PASSPHRASE": "x", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
    "github_token": "lower", "DATABASE_URL": "postgres://app:hunter2@db/x", "ALL_PROXY": "http://u:@proxy:3128",
    # not secrets: the controls
    "PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "TERM": "xterm", "GIT_AUTHOR_NAME": "Me",
    "PLAIN_URL": "https://example.test/a:b@c", "NO_AT": "http://user:pass", "SSH_AUTH_SOCK_NAME": "none",
}
SECRETS = {"OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "PGPASSWORD",
           "GPG_PASSPHRASE", "GOOGLE_APPLICATION_CREDENTIALS", "github_token", "DATABASE_URL", "ALL_PROXY"}


def test_the_rule_names_exactly_the_secrets():
    assert {n for n, v in HOST.items() if is_secret(n, v)} == SECRETS
    assert secret_names(HOST) == sorted(SECRETS)
    assert "GITHUB_TOKEN" not in secret_names(HOST, named=["GITHUB_TOKEN"])


def test_the_default_policy_leaves_them_out_and_a_bare_env_passes_all():
    env = Policy.default().env.apply(HOST)
    assert set(env) == set(HOST) - SECRETS
    assert Env().apply(HOST) == HOST                                          # control: a bare Env
    assert Policy.default(hide_credentials=False).env.apply(HOST) == HOST     # the opt-out


def test_what_the_caller_names_wins():
    kept = Policy.default(env=Env(keep=("GITHUB_TOKEN", "PATH"))).env.apply(HOST)
    assert kept == {"GITHUB_TOKEN": "ghp_1", "PATH": "/usr/bin:/bin"}
    set_ = Policy.default(env=Env(set={"OPENAI_API_KEY": "sk-mine"})).env.apply(HOST)
    assert set_["OPENAI_API_KEY"] == "sk-mine" and "GITHUB_TOKEN" not in set_
    assert Policy.default(env=Env(clear=True)).env.apply(HOST) == {}


def test_drop_secrets_must_be_a_bool():
    with pytest.raises(PolicyError) as err:
        Env(drop_secrets="yes")
    assert err.value.reason.value == "invalid_value"


def test_status_names_what_is_left_out():
    from pysandbox.credentials import coverage
    cov = coverage(Policy.default(), environ=dict(HOST, HOME="/nonexistent-home"))
    assert cov["env_drops_secrets"] and cov["env_dropped"] == sorted(SECRETS)
    cov = coverage(Policy.default(env=Env(set={"GITHUB_TOKEN": "x"})), environ=dict(HOST, HOME="/nonexistent-home"))
    assert "GITHUB_TOKEN" not in cov["env_dropped"]
    cov = coverage(Policy.default(hide_credentials=False), environ=dict(HOST, HOME="/nonexistent-home"))
    assert not cov["env_drops_secrets"] and cov["env_dropped"] == []


# is_secret answers without `re` where it can (issue 28: a launch's start-up): the same
# answer as the two patterns themselves, beyond ASCII too.
SECRET_CASES = [("OPENAI_API_KEY", "x"), ("github_token", ""), ("MyPassWord", "x"), ("monkey", "x"),
                ("PATH", "/usr/bin"), ("HOME", "/root"), ("DATABASE_URL", "postgres://u:p@h/db"),
                ("DATABASE_URL", "postgres://u@h/db"), ("X", "https://h/a@b"), ("X", "a@b://c"),
                ("X", "s3://:@h"), ("X", "1x://u:p@h"), ("\u212aEY", "x"), ("PA\u017fSWORD", "x"),
                ("caf\u00e9_token", "x"), ("caf\u00e9", "x"), ("X", "ftp://u:p@h\u00e9"), ("T\u00f6KEN", "")]


@pytest.mark.parametrize("name,value", SECRET_CASES)
def test_is_secret_equals_the_patterns(name, value):
    import re
    from pysandbox import env_secrets
    by_pattern = bool(re.search(env_secrets.SECRET_NAME, name, re.I) or re.match(env_secrets.URL_WITH_PASSWORD, value))
    assert env_secrets.is_secret(name, value) == by_pattern


def test_control_the_cases_hold_both_answers_and_a_fold_beyond_ascii():
    import re
    from pysandbox import env_secrets
    answers = {bool(re.search(env_secrets.SECRET_NAME, n, re.I) or re.match(env_secrets.URL_WITH_PASSWORD, v))
               for n, v in SECRET_CASES}
    assert answers == {True, False}
    # the Kelvin sign matches K under re.I, and its upper case is not "K": the fallback decides it
    assert re.search(env_secrets.SECRET_NAME, "\u212aEY", re.I) and "KEY" not in "\u212aEY".upper()
