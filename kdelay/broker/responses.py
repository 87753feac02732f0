"""Building kio responses across API versions: a version's dataclass takes exactly its own
fields, so a handler offers every field any version has and `build` keeps the ones this
version takes. Cost: a dict comprehension per object built."""

from __future__ import annotations

import types
import typing
from typing import Any


def build(cls: type, **values: Any) -> Any:
    """`cls(**values)` with the values of fields `cls` does not have left out (a field it
    has but `values` lacks is a TypeError, as for any dataclass)."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in values.items() if k in names})


def entry_type(cls: type, name: str) -> type:
    """The element class of `cls`'s field `name` (a tuple of entities, maybe optional), or
    the field's own class (a nested entity)."""
    t = cls.__dataclass_fields__[name].type  # type: ignore[attr-defined]
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        t = next(a for a in typing.get_args(t) if a is not type(None))
    if typing.get_origin(t) is tuple:
        return typing.get_args(t)[0]
    return t
