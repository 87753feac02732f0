"""Building kio messages across API versions: a version's dataclass takes exactly its own
fields, so a handler offers every field any version has and `build` keeps the ones this
version takes; `make` does the same and also fills the fields handlers never care about
(throttle time, tagged additions such as `rack` or `current_leader`) from defaults, so a
handler writes one response for every version it answers. `element(cls, name)` is the
class of the items of a tuple field, `has(cls, name)` whether a version has a field.
Cost: a pass over the class's fields per message (cached field lists).
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta


def build(cls: type, **values: Any) -> Any:
    """`cls(**values)` with the values of fields `cls` does not have left out (a field it
    has but `values` lacks is a TypeError, as for any dataclass)."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in values.items() if k in names})


@cache
def entry_type(cls: type, name: str) -> type:
    """The element class of `cls`'s field `name` (a tuple of entities, maybe optional), or
    the field's own class (a nested entity). Cached: handlers ask it on every request."""
    t = cls.__dataclass_fields__[name].type  # type: ignore[attr-defined]
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        t = next(a for a in typing.get_args(t) if a is not type(None))
    if typing.get_origin(t) is tuple:
        return typing.get_args(t)[0]
    return t


_ZERO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
_DEFAULTS: dict[str, Any] = {
    "throttle_time": _ZERO_THROTTLE,
    "error_code": ErrorCode.none,
    "error_message": None,
    "rack": None,
    "node_endpoints": (),
    "record_errors": (),
    "log_append_time": None,
    "log_start_offset": -1,
    "topic_authorized_operations": -2147483648,
    "cluster_authorized_operations": -2147483648,
    "offline_replicas": (),
    "leader_epoch": 0,
    "is_internal": False,
    "documentation": None,
    "synonyms": (),
}


@cache
def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    """An instance of `cls` with the fields it has, from `values` or the defaults; a
    required field in neither raises TypeError naming it."""
    kwargs = {}
    for name in _fields(cls):
        if name in values:
            kwargs[name] = values[name]
        elif name in _DEFAULTS:
            kwargs[name] = _DEFAULTS[name]
        else:
            nested = _nested_default(cls, name)
            if nested is None:
                raise TypeError(f"{cls.__qualname__} needs {name}")
            kwargs[name] = nested
    return cls(**kwargs)


@cache
def _nested_default(cls: type, name: str) -> Any:
    """A nested struct nobody here sets (Produce's current_leader): one made of -1s."""
    hints = typing.get_type_hints(cls)
    t = hints.get(name)
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        return t(**{f.name: -1 for f in dataclasses.fields(t)})
    return None


@cache
def element(cls: type, name: str) -> type:
    """The class of the items of `cls`'s tuple field `name`."""
    t = typing.get_type_hints(cls)[name]
    for arg in _walk(t):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
    raise TypeError(f"{cls.__qualname__}.{name} holds no messages")


def _walk(t: Any) -> list[Any]:
    out = [t]
    for arg in typing.get_args(t):
        out += _walk(arg)
    return out


def has(cls: type, name: str) -> bool:
    return name in _fields(cls)
