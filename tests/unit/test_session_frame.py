"""The SPAWN frame's strings (pysandbox/session_proto.py, read by native/psb_session.c)
and the session's cache of the encoded environment (EnvEncoder): the cache never
changes a byte of the frame, and a changed environment is never sent from the cache."""

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
    want = reference(7, "/w", ["/bin/true"], ["true", "x"], env, [0, 1, 2])
    for _ in range(2):   # the second one from the cache
        assert W.spawn_frame(7, "/w", ["/bin/true"], ["true", "x"], env, [0, 1, 2], encoder=enc) == want
    assert W.spawn_frame(7, "/w", ["/bin/true"], ["true", "x"], env, [0, 1, 2]) == want


def test_a_changed_environment_is_encoded_again():
    enc = W.EnvEncoder()
    env = dict(ENV)
    first = W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc)
    env["LANG"] = "C"   # the same dict, changed in place: compared by value, not identity
    second = W.spawn_frame(1, "/", ["/bin/true"], ["true"], env, [], encoder=enc)
    assert second == reference(1, "/", ["/bin/true"], ["true"], env, []) and second != first


def test_a_nul_in_the_environment_is_refused_and_not_cached():
    enc = W.EnvEncoder()
    W.spawn_frame(1, "/", ["/bin/true"], ["true"], ENV, [], encoder=enc)
    with pytest.raises(ValueError, match="NUL"):
        W.spawn_frame(1, "/", ["/bin/true"], ["true"], {**ENV, "BAD": "a\0b"}, [], encoder=enc)
    assert enc.last[0] == ENV   # the refused one never replaced the last good one
    with pytest.raises(ValueError, match="NUL"):
        W.spawn_frame(1, "/", ["/bin/true"], ["tr\0ue"], ENV, [], encoder=enc)
