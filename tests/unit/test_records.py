"""pysandbox.records: every record class of the product behaves as the dataclass
``dataclasses.dataclass`` would make of the same class body (fields, signature,
argument errors, repr, eq, hash, frozenness, replace, copy and pickle), and what is
outside its subset is made by ``dataclasses`` itself."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import re

import pytest

from pysandbox import records

MODULES = ("pysandbox.ops", "pysandbox.fs", "pysandbox.policy", "pysandbox.plan", "pysandbox.authority",
           "pysandbox.probe", "pysandbox.backends.base", "pysandbox.backends.native.native_host",
           "pysandbox.backends.native_ops", "bwrap_compat.args", "bwrap_compat.mapping")


def record_classes():
    out = []
    for name in MODULES:
        module = importlib.import_module(name)
        out += [cls for cls in vars(module).values()
                if isinstance(cls, type) and cls.__module__ == name and "_record_fields" in vars(cls)]
    return out


RECORDS = record_classes()


def body(cls, maker):
    """A class with ``cls``'s fields and defaults and nothing else, made by ``maker``
    (no __post_init__: the generated methods alone are compared)."""
    namespace = {"__annotations__": {f.name: f.type for f in dataclasses.fields(cls)}}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            namespace[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f.name] = (records.field if maker is records.dataclass else dataclasses.field)(
                default_factory=f.default_factory)
    return maker(type(cls.__name__, (), namespace), frozen=cls.__dataclass_params__.frozen)


def outcome(fn):
    try:
        return ("ok", fn())
    except (TypeError, AttributeError) as exc:   # FrozenInstanceError is an AttributeError
        return (type(exc).__name__, re.sub(r"^\w+\.__init__\(\)", "__init__()", str(exc)))


def test_the_product_records_are_made_here():
    assert len(RECORDS) >= 50
    assert {"Policy", "Bind", "Plan", "BindMount", "Launch", "BwrapArgs"} <= {c.__name__ for c in RECORDS}


@pytest.mark.parametrize("cls", RECORDS, ids=[c.__qualname__ for c in RECORDS])
def test_record_matches_dataclass(cls):
    twin = body(cls, dataclasses.dataclass)
    assert dataclasses.is_dataclass(cls)
    strip = lambda s: re.sub(r" at 0x[0-9a-f]+", "", str(s))  # noqa: E731
    assert strip(inspect.signature(cls)) == strip(inspect.signature(twin))
    assert [(f.name, f.type, strip(f.default), f.default_factory) for f in dataclasses.fields(cls)] == \
           [(f.name, f.type, strip(f.default), f.default_factory) for f in dataclasses.fields(twin)]
    assert repr(cls.__dataclass_params__) == repr(twin.__dataclass_params__)
    assert cls.__match_args__ == twin.__match_args__
    assert (cls.__hash__ is None) == (twin.__hash__ is None)
    made = body(cls, records.dataclass)
    names = [f.name for f in dataclasses.fields(cls)]
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for args, kwargs in [((), {}), (tuple(range(len(names) + 2)), {}), ((1,), {names[0]: 1} if names else {}),
                         ((), {"no_such_field": 1}), (tuple(range(len(required))), {})]:
        assert outcome(lambda: repr(made(*args, **kwargs))) == outcome(lambda: repr(twin(*args, **kwargs)))
    # the one-update path (records._init) and the field-by-field one leave the same dict, in order
    by_name = {n: i for i, n in enumerate(required)}
    for args, kwargs in [((), by_name), (tuple(range(len(required))), {}),
                         ((0,), dict(list(by_name.items())[1:])) if required else ((), {})]:
        assert list(vars(made(*args, **kwargs)).items()) == list(vars(twin(*args, **kwargs)).items())
    a, b, other = made(*range(len(required))), made(*range(len(required))), twin(*range(len(required)))
    assert a == b and not a != b and a != other and (a == 0) is False
    assert outcome(lambda: hash(a)) == outcome(lambda: hash(other))
    assert copy.deepcopy(a) == a
    if names:
        assert outcome(lambda: setattr(a, names[0], 7)) == outcome(lambda: setattr(other, names[0], 7))
        assert outcome(lambda: delattr(a, names[-1])) == outcome(lambda: delattr(other, names[-1]))
        assert outcome(lambda: records.replace(a, no_such_field=1)) == \
               outcome(lambda: dataclasses.replace(other, no_such_field=1))


def test_product_instances_replace_copy_pickle():
    import pysandbox
    from pysandbox import plan
    policy = pysandbox.Policy.default(network="deny")
    assert pickle.loads(pickle.dumps(policy)) == policy and hash(copy.deepcopy(policy)) == hash(policy)
    assert pickle.loads(pickle.dumps(plan.compile(policy))) == plan.compile(policy)
    assert policy.replace(hostname="h").hostname == "h" == dataclasses.replace(policy, hostname="h").hostname
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.uid = 0
    with pytest.raises(pysandbox.PolicyError):   # __post_init__ (validated) runs
        pysandbox.Bind("/", "relative/dest")


def test_outside_the_subset_dataclasses_makes_it():
    class WithOptions:
        a: int = records.field(default=1, compare=False)

    class Mutable:
        a: list = []   # dataclasses refuses a mutable default

    made = records.dataclass(WithOptions)
    assert "_record_fields" not in vars(made) and made(1) == made(2)
    with pytest.raises(ValueError):
        records.dataclass(Mutable)
    with pytest.raises(TypeError):
        records.dataclass(type("Order", (), {"__annotations__": {"a": "int", "b": "int"}, "a": 1}))
