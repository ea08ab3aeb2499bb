"""`@frozen`: what `@dataclass(frozen=True)` gives, for the records a login-node command imports.

A frozen dataclass compiles six methods from source text when its module is imported (`__init__`,
`__repr__`, `__eq__`, `__hash__`, `__setattr__`, `__delattr__`): 4 to 27 million instructions a class,
the larger part of `slurmgen render`'s own start (issue 43: render within 0.35x of TorchX's dry run).
Here dataclass only records the fields, and the six methods are the shared functions below, which
read them. Same behaviour: keyword or positional arguments in field order with the fields'
defaults, FrozenInstanceError on any assignment or deletion, equality and hash over the compared
fields for the same class only, the dataclass repr; `dataclasses.fields`, `replace`, `asdict` and
pickling as before. (No default_factory, InitVar or __post_init__: no record here has them.)"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, fields


def _init(self, *args, **kwargs):
    cls = self.__class__
    names, defaults = cls._record_init
    if len(args) > len(names):
        raise TypeError(f"{cls.__qualname__}() takes {len(names)} positional arguments but {len(args)} were given")
    values = dict(zip(names, args))
    for name in kwargs:
        if name in values:
            raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
        if name not in defaults:
            raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {name!r}")
    values.update(kwargs)
    for name, default in defaults.items():
        if name not in values:
            if default is MISSING:
                raise TypeError(f"{cls.__qualname__}() missing required argument {name!r}")
            values[name] = default
    self.__dict__.update(values)  # past __setattr__, as dataclass's frozen __init__ goes


def _setattr(self, name, value):
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _compared(self) -> tuple:
    return tuple(getattr(self, f.name) for f in fields(self) if f.compare)


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _compared(self) == _compared(other)


def _hash(self):
    return hash(_compared(self))


def _repr(self):
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


def frozen(cls=None, *, eq: bool = True):
    """@dataclass(frozen=True); eq=False: compared, hashed and shown by identity, as
    @dataclass(frozen=True, eq=False, repr=False)."""

    def make(cls):
        cls = dataclass(init=False, eq=False, repr=False)(cls)
        declared = fields(cls)
        if any(f.default_factory is not MISSING or not f.init for f in declared) or hasattr(cls, "__post_init__"):
            raise TypeError(f"{cls.__qualname__}: @frozen takes plain fields with plain defaults")
        cls._record_init = (tuple(f.name for f in declared), {f.name: f.default for f in declared})
        cls.__init__, cls.__setattr__, cls.__delattr__ = _init, _setattr, _delattr
        if eq:
            cls.__eq__, cls.__hash__, cls.__repr__ = _eq, _hash, _repr
        return cls

    return make if cls is None else make(cls)
