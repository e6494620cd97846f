"""The SPAWN frame's strings (pysandbox/session_proto.py, read by native/psb_session.c)
and the session's cache of the encoded environment (EnvEncoder): the cache never
changes a byte of the frame, a changed environment is never sent from the cache, and the
cache is found by the launcher's key (EnvCache.keyed), without comparing the environment
again."""

from __future__ import annotations

import struct

import pytest

from pysandbox import session_proto as W


def reference(cid, cwd, candidates, argv, env, targets):
    """The frame built the plain way: every string encoded as os.fsencode, NUL-ended."""
    strings = [cwd, *candidates, *argv, *(f"{k}={v}" for k, v in env.items())]
    blob = b"".join(s.encode("utf-8", "surrogateescape") + b"\0" for s in strings)
    payload = struct.pack(f"<{len(targets)}I", *targets) + blob
    return struct.pack("<8I", W.MAGIC, W.SPAWN, cid, len(candidates), len(argv), len(env), len(targets),
                       len(payload)) + payload


ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "RAW": "\udcff-byte", "PWD": "/w"}


@pytest.mark.parametrize("env", [ENV, {}])
def test_the_frame_is_the_plain_encoding_with_and_without_the_cache(env):
    enc = W.EnvEncoder()
    key = object()
    want = reference(7, "/w", ["/bin/true"], ["true", "x"], env, [0, 1, 2])
    for _ in range(2):   # the second one from the cache
        assert W.spawn_frame(7, "/w", ["/bin/true"], ["true", "x"], env, [0, 1, 2], encoder=enc, env_key=key) == want
    assert enc.last is not None and enc.last[0] is key
    assert W.spawn_frame(7, "/w", ["/bin/true"], ["true", "x"], env, [0, 1, 2]) == want


class Uncomparable(dict):
    """An environment the encoder must not compare: the key decides (one comparison a
    command, the launcher's EnvCache's)."""

    def __eq__(self, other):
        raise AssertionError("the environment was compared")

    __ne__ = __eq__
    __hash__ = None


def test_the_cache_is_found_by_its_key_without_comparing_the_environment():
    enc = W.EnvEncoder()
    key = object()
    env = Uncomparable(ENV)
    first = W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc, env_key=key)
    assert W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc, env_key=key) == first
    # control: the value-comparing cache this replaces would have compared it
    with pytest.raises(AssertionError, match="compared"):
        env == dict(ENV)


def test_a_changed_environment_is_encoded_again():
    enc = W.EnvEncoder()
    key = object()
    env = dict(ENV)
    first = W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc, env_key=key)
    env["LANG"] = "C"   # changed: its launcher names it by a new key (EnvCache.keyed), or by none
    for new_key in (object(), None):
        again = W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc, env_key=new_key)
        assert again == reference(1, "/", ["/bin/true"], ["true"], env, []) and again != first
    # the same key with another PWD (the command's working directory): encoded again
    env = dict(ENV)
    W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc, env_key=key)
    env["PWD"] = "/elsewhere"
    moved = W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc, env_key=key)
    assert moved == reference(1, "/", ["/bin/true"], ["true"], env, [])


def test_a_nul_in_the_environment_is_refused_and_not_cached():
    enc = W.EnvEncoder()
    key = object()
    W.spawn_frame(1, "/", ["/bin/true"], ["true"], ENV, [], encoder=enc, env_key=key)
    with pytest.raises(ValueError, match="NUL"):
        W.spawn_frame(1, "/", ["/bin/true"], ["true"], {**ENV, "BAD": "a\0b"}, [], encoder=enc, env_key=object())
    assert enc.last is not None and enc.last[0] is key   # the refused one never replaced the last good one
    with pytest.raises(ValueError, match="NUL"):
        W.spawn_frame(1, "/", ["/bin/true"], ["tr\0ue"], ENV, [], encoder=enc, env_key=key)


def test_the_launchers_key_is_the_same_exactly_while_its_environment_is(monkeypatch):
    from pysandbox.environment import Env, EnvCache
    cache, ops = EnvCache(), Env(unset=("PSB_GONE",))
    monkeypatch.setenv("PSB_KEYED", "one")
    env, key = cache.keyed(ops)
    again, same = cache.keyed(ops)
    assert key is not None and same is key and again == env and again is not env   # a copy each time
    monkeypatch.setenv("PSB_KEYED", "two")   # os.environ changed: a new key, the new value
    changed, new_key = cache.keyed(ops)
    assert new_key is not key and changed["PSB_KEYED"] == "two"
    other, ops_key = cache.keyed(Env(unset=("PSB_KEYED",)))   # other edits: a new key
    assert ops_key is not new_key and "PSB_KEYED" not in other
    given, none = cache.keyed(ops, {"PSB_KEYED": "three"})   # env= given: no key, never from the cache
    assert none is None and given == {"PSB_KEYED": "three"}
