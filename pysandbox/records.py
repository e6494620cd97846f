"""``@dataclass`` for the records every launch builds (policy, fs and plan operations,
backend records), made at a fraction of ``dataclasses.dataclass``'s cost at import.

``dataclasses.dataclass`` (Python 3.11) compiles six functions one by one per frozen
class and formats an ``inspect.signature`` for each class without a docstring: about
0.3-0.7 ms a class, and importing it imports ``inspect``. With some fifty such classes
that was most of ``import pysandbox`` and of a command line's start-up (issue 15).

Here nothing is compiled: each class gets closures that do what the generated methods
do (``__init__`` with the same parameters, defaults, factories, ``__post_init__`` and
argument errors; ``__repr__``, ``__eq__``, ``__hash__``; a frozen class's
``__setattr__``/``__delattr__`` raising ``FrozenInstanceError``). ``dataclasses`` and
``inspect`` are imported only when something asks for the metadata:
``__dataclass_fields__``, ``__dataclass_params__`` and ``__signature__`` are computed on
first access, from a twin of the class made by ``dataclasses.dataclass`` itself, so
``dataclasses.fields``, ``replace``, ``asdict``, ``is_dataclass`` and
``inspect.signature`` answer as for a dataclass.
What is outside the subset used here (``field()`` options other than ``default`` and
``default_factory``, ``ClassVar``/``InitVar``/``KW_ONLY`` fields, dataclass bases,
explicit ``__setattr__`` on a frozen class, mutable defaults ...) goes to
``dataclasses.dataclass`` unchanged.
"""

from __future__ import annotations

from _operator import attrgetter   # operator's own (operator.py re-exports _operator's; issue 28)

__all__ = ["TYPE_CHECKING", "dataclass", "field", "field_names", "replace"]

TYPE_CHECKING = False   # not typing's: importing typing costs a command line's start-up (issue 15)
if TYPE_CHECKING:
    from typing import dataclass_transform
else:
    def dataclass_transform(**_):
        return lambda fn: fn

_MISSING = object()


class _Field:
    __slots__ = ("default", "default_factory")

    def __init__(self, default, default_factory):
        self.default, self.default_factory = default, default_factory


def field(*, default=_MISSING, default_factory=_MISSING, **options):
    """``dataclasses.field``: ``default`` and ``default_factory`` here; any other option
    returns ``dataclasses.field`` itself (and its class is made by ``dataclasses``)."""
    if options:
        import dataclasses
        kwargs = dict(options)
        if default is not _MISSING:
            kwargs["default"] = default
        if default_factory is not _MISSING:
            kwargs["default_factory"] = default_factory
        return dataclasses.field(**kwargs)
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory)


def replace(obj, /, **changes):
    """``dataclasses.replace`` (without importing ``dataclasses`` for a record made here)."""
    names = vars(type(obj)).get("_record_fields")
    if names is None:
        import dataclasses
        return dataclasses.replace(obj, **changes)
    for name in names:
        if name not in changes:
            changes[name] = getattr(obj, name)
    return obj.__class__(**changes)


def field_names(cls) -> tuple:
    """The field names of a record class, in order (``dataclasses.fields`` without
    importing ``dataclasses`` for a record made here)."""
    names = vars(cls).get("_record_fields")
    if names is None:
        import dataclasses
        return tuple(f.name for f in dataclasses.fields(cls))
    return tuple(names)


@dataclass_transform(field_specifiers=(field,))
def dataclass(cls=None, /, *, frozen: bool = False):
    """``dataclasses.dataclass(frozen=frozen)`` with its defaults (init, repr, eq)."""
    def wrap(c):
        return _make(c, frozen)
    return wrap if cls is None else wrap(cls)


def _simple(cls, frozen: bool, annotations: dict) -> bool:
    """Whether ``cls`` is in the subset built here."""
    if any("__dataclass_fields__" in vars(base) for base in cls.__mro__[1:]):
        return False
    if frozen and ("__setattr__" in vars(cls) or "__delattr__" in vars(cls)):
        return False
    if "__slots__" in vars(cls) or "__hash__" in vars(cls):
        return False
    for name, kind in annotations.items():
        text = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
        if any(word in text for word in ("ClassVar", "InitVar", "KW_ONLY")):
            return False
        value = vars(cls).get(name, _MISSING)
        if value is _MISSING or isinstance(value, _Field):
            continue
        if type(value).__name__ == "Field" or type(value) in (list, dict, set) or \
                getattr(type(value), "__hash__", None) is None:
            return False
    return True


def _make(cls, frozen: bool):
    annotations = vars(cls).get("__annotations__", {})
    if not _simple(cls, frozen, annotations):
        return _by_dataclasses(cls, frozen)
    names = tuple(annotations)
    defaults, factories = {}, {}
    for name in names:
        value = vars(cls).get(name, _MISSING)
        if isinstance(value, _Field):
            if value.default_factory is not _MISSING:
                factories[name] = value.default_factory
            elif value.default is not _MISSING:
                defaults[name] = value.default
            if value.default is not _MISSING:
                setattr(cls, name, value.default)
            else:
                delattr(cls, name)
        elif value is not _MISSING:
            defaults[name] = value
        elif defaults or factories:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    made = {"__init__": _init(cls, names, defaults, factories, frozen)}
    values = _getter(names)
    if "__repr__" not in vars(cls):
        def __repr__(self):
            return self.__class__.__qualname__ + "(" + ", ".join(
                f"{name}={value!r}" for name, value in zip(names, values(self))) + ")"
        made["__repr__"] = __repr__
    if "__eq__" not in vars(cls):
        def __eq__(self, other):
            if other.__class__ is self.__class__:
                return values(self) == values(other)
            return NotImplemented
        made["__eq__"] = __eq__
    if frozen:
        def __hash__(self):
            return hash(values(self))

        def __setattr__(self, name, value):
            if type(self) is cls or name in names:
                _frozen_error(f"cannot assign to field {name!r}")
            super(cls, self).__setattr__(name, value)

        def __delattr__(self, name):
            if type(self) is cls or name in names:
                _frozen_error(f"cannot delete field {name!r}")
            super(cls, self).__delattr__(name)
        made.update(__hash__=__hash__, __setattr__=__setattr__, __delattr__=__delattr__)
    for name, fn in made.items():
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)
    cls.__init__.__annotations__ = {**annotations, "return": None}
    if not frozen:
        cls.__hash__ = None   # as dataclasses for eq=True: a mutable record is not hashable
    setattr(cls, "__match_args__", names)
    cls._record_fields = names
    for attr in ("__dataclass_fields__", "__dataclass_params__", "__signature__"):
        setattr(cls, attr, _Metadata(cls, frozen, attr, annotations, defaults, factories))
    return cls


def _getter(names):
    """obj -> the tuple of its field values (what dataclasses compares and hashes)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


_FACTORY = object()   # a field whose default_factory is still to call


def _init(cls, names, defaults, factories, frozen):
    """``__init__(self, <names>)`` as dataclasses writes it, Python's argument errors included."""
    count = len(names)
    index = set(names)
    required = tuple(n for n in names if n not in defaults and n not in factories)
    assign = object.__setattr__ if frozen else setattr
    post_init = hasattr(cls, "__post_init__")
    qualname = f"{cls.__qualname__}.__init__"
    # The common call (no unknown, repeated or missing argument) fills the instance's dict
    # in one update, in the fields' order: what assigning each field does when none is a
    # data descriptor and the class's own __setattr__ is object's (a frozen class's is
    # bypassed either way). Anything else takes the field-by-field path below, errors included.
    fast = (frozen or cls.__setattr__ is object.__setattr__) and \
        not any(hasattr(type(getattr(cls, name, None)), "__set__") for name in names)
    start = {n: defaults[n] if n in defaults else _FACTORY if n in factories else _MISSING for n in names}
    # the required fields lead (a field without a default after one with is a class error)
    fast = fast and required == names[:len(required)]
    nreq = len(required)

    def __init__(self, *args, **kwargs):
        given = len(args)
        if fast and type(self) is cls and given <= count and index.issuperset(kwargs) \
                and not (given and kwargs and any(n in kwargs for n in names[:given])) \
                and (given >= nreq or all(n in kwargs for n in names[given:nreq])):
            values = start.copy()
            values.update(zip(names, args))
            values.update(kwargs)
            for name in factories:
                if values[name] is _FACTORY:
                    values[name] = factories[name]()
            self.__dict__.update(values)
            if post_init:
                self.__post_init__()
            return
        given = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in index:
                raise TypeError(f"{qualname}() got an unexpected keyword argument {key!r}")
            if key in given:
                raise TypeError(f"{qualname}() got multiple values for argument {key!r}")
            given[key] = value
        if len(args) > count:
            takes = f"from {len(required) + 1} to {count + 1}" if len(required) < count else count + 1
            raise TypeError(f"{qualname}() takes {takes} positional argument{'s' if count else ''} "
                            f"but {len(args) + 1} were given")
        missing = [n for n in required if n not in given]
        if missing:
            quoted = [repr(n) for n in missing]
            listed = quoted[0] if len(quoted) == 1 else \
                f"{quoted[0]} and {quoted[1]}" if len(quoted) == 2 else ", ".join(quoted[:-1]) + ", and " + quoted[-1]
            raise TypeError(f"{qualname}() missing {len(missing)} required positional "
                            f"argument{'s' if len(missing) > 1 else ''}: {listed}")
        for name in names:
            if name in given:
                value = given[name]
            elif name in defaults:
                value = defaults[name]
            else:
                value = factories[name]()
            assign(self, name, value)
        if post_init:
            self.__post_init__()
    return __init__


def _frozen_error(message: str):
    from dataclasses import FrozenInstanceError
    raise FrozenInstanceError(message)


def _by_dataclasses(cls, frozen: bool):
    import dataclasses
    for name in vars(cls).get("__annotations__", {}):
        value = vars(cls).get(name, _MISSING)
        if isinstance(value, _Field):
            setattr(cls, name, dataclasses.field(
                default=dataclasses.MISSING if value.default is _MISSING else value.default,
                default_factory=dataclasses.MISSING if value.default_factory is _MISSING else value.default_factory))
    return dataclasses.dataclass(cls, frozen=frozen)


class _Metadata:
    """``__dataclass_fields__``, ``__dataclass_params__`` and ``__signature__`` of a class
    made here, computed on first access from a twin made by ``dataclasses.dataclass``,
    then stored on the class."""

    def __init__(self, owner, frozen, attr, annotations, defaults, factories):
        self.owner, self.frozen, self.attr = owner, frozen, attr
        self.annotations, self.defaults, self.factories = annotations, defaults, factories

    def __get__(self, instance, cls=None):
        import dataclasses
        namespace = {"__annotations__": dict(self.annotations), **self.defaults,
                     **{n: dataclasses.field(default_factory=f) for n, f in self.factories.items()}}
        twin = dataclasses.dataclass(type(self.owner.__name__, (), namespace), frozen=self.frozen)
        made = {attr: vars(twin)[attr] for attr in ("__dataclass_fields__", "__dataclass_params__")}
        import inspect
        made["__signature__"] = inspect.signature(twin)
        for attr, value in made.items():
            type.__setattr__(self.owner, attr, value)
        return made[self.attr]
