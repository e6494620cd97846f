"""The native translation of a representative set of plans, op for op, against the
arrays the single-function translation produced (captured into
``fixtures/native_translate.json`` before the per-op emitters replaced it)."""

from __future__ import annotations

import json
import os

import pytest

from pysandbox import plan as P
from pysandbox.backends.native.native_host import HostView
from pysandbox.backends.native_ops import pack
from pysandbox.backends.native.native_translate import translate

from ._translate_cases import HOSTS, cases, compile_case, normalised

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "native_translate.json")
EXPECTED = json.load(open(FIXTURE))


@pytest.mark.parametrize("host", sorted(HOSTS))
@pytest.mark.parametrize("name,policy", list(cases()), ids=[n for n, _ in cases()])
def test_translation_is_unchanged(name, policy, host):
    plan = compile_case(policy)
    kw = HOSTS[host]
    ops = translate(plan, **kw)
    packed = pack(plan, ops, fallback=kw.get("fallback", False))
    want = EXPECTED[f"{name}/{host}"]
    assert normalised(plan, ops) == want["ops"]
    assert (packed.clone_flags, packed.want_status, len(packed.strtab)) == (
        want["clone_flags"], want["want_status"], want["strtab_len"])
    assert [list(o) for o in packed.offsets] == want["offsets"]


def test_an_injected_host_view_decides_bind_types():
    """A fake host: the bind source's type comes from the view, not from stat()."""
    plan = compile_case(next(pol for name, pol in cases() if name == "binds"))
    as_files = translate(plan, HostView(is_dir=lambda op: False))
    as_dirs = translate(plan, HostView(is_dir=lambda op: True))
    binds = [i for i, op in enumerate(plan.ops) if isinstance(op, P.BindMount)]
    assert any(op.kind == "MKFILE" and op.plan_index in binds for op in as_files)
    assert not any(op.kind == "MKFILE" for op in as_dirs)
