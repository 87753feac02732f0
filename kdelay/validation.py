"""Argument checks shared by the facade and the clients: ints, times, offsets, keys, page
limits and the deliverAfter a batch asks for (a whole batch's records are checked with the
batch: kdelay/log/batch/columns.py). Every check raises a KdelayError before anything is
written.

One rule for every time, offset and count: an `int` or a numpy integer is accepted (and
handed on as a plain `int`, so nothing downstream ever sees a numpy scalar: fixed-width
arithmetic would overflow, and the group and marker files would hold what their readers
refuse); bool, float, str, None (where not optional) and anything else is refused. Times
and offsets must fit the on-disk int64 fields: 0 <= value < 2**63.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeGuard, cast

import numpy as np

from .config import LogConfig
from .errors import (
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    InvalidOffsetError,
    InvalidRecordError,
    KdelayError,
)
from .records import DeliveryKey

MAX_INT64 = (1 << 63) - 1


def check_open_args(path: object, config: object, clock: object, what: str = "log"
                    ) -> tuple[str, LogConfig]:
    """The arguments of Log.open / Topic.open, checked before anything is created: a str
    or PathLike that is a directory or does not exist yet, a LogConfig (None: defaults),
    a callable clock (None: the wall clock). Returns (path, config)."""
    if not isinstance(path, str | bytes | os.PathLike):
        raise KdelayError(f"{what} path must be a str or os.PathLike, got {path!r}")
    try:
        path = os.fspath(path)
    except TypeError:  # a PathLike whose __fspath__ returns neither str nor bytes
        raise KdelayError(f"{what} path must be a str or os.PathLike, got {path!r}") from None
    if not isinstance(path, str) or not path:
        raise KdelayError(f"{what} path must be a non-empty str, got {path!r}")
    if config is None:
        config = LogConfig()
    elif not isinstance(config, LogConfig):
        raise KdelayError(f"config must be a LogConfig, got {type(config).__name__}")
    if clock is not None and not callable(clock):
        raise KdelayError(f"clock must be a callable returning ms since the epoch (or None),"
                          f" got {clock!r}")
    if os.path.exists(path) and not os.path.isdir(path):
        raise KdelayError(f"{what} path {path} exists and is not a directory")
    return path, config


def is_int(x: object) -> TypeGuard[int | np.integer]:
    """An int or a numpy integer (never a bool)."""
    return (isinstance(x, int) and not isinstance(x, bool)) or isinstance(x, np.integer)


def as_int(x: object, what: str, *, lo: int = 0, hi: int = MAX_INT64,
           error: type[KdelayError] = KdelayError) -> int:
    """`x` as a plain int in [lo, hi], else `error` naming `what`. O(1)."""
    if type(x) is not int:
        if not is_int(x):
            raise error(f"{what} must be an int, got {x!r} ({type(x).__name__})")
        x = int(x)
    if not lo <= x <= hi:
        raise error(f"{what} must be in [{lo}, {hi}], got {x}")
    return x


def as_time(x: object, what: str, error: type[KdelayError] = KdelayError) -> int:
    """A time in ms since the epoch (or an offset): an int in [0, 2**63)."""
    return as_int(x, what, error=error)


def clock_value(t: object) -> int:
    """Check what a clock returned (called on every reading: the int case is one test)."""
    if type(t) is int and 0 <= t <= MAX_INT64:
        return t
    return as_int(t, "the clock's value (ms since the epoch)")


def is_non_negative_int(x: object) -> bool:
    return is_int(x) and bool(x >= 0)


def is_positive_int(x: object) -> bool:
    return is_int(x) and bool(x > 0)


def as_offset(x: object) -> int | None:
    """`x` as an offset (a plain int in [0, 2**63); numpy integers accepted, bool refused),
    else None."""
    if type(x) is int:
        return x if 0 <= x <= MAX_INT64 else None
    if is_int(x) and 0 <= x <= MAX_INT64:
        return int(x)
    return None


def offsets_arg(offsets: object) -> list[int]:
    """An offset or an iterable of them as a list of plain ints; anything else (a bool, a
    float, a string or bytes, a negative number, in place or inside the iterable) raises
    InvalidOffsetError before anything is written. O(offsets)."""
    one = as_offset(offsets)
    if one is not None:
        return [one]
    if is_int(offsets) or isinstance(offsets, (bool, str, bytes, bytearray, memoryview)) \
            or offsets is None:
        raise InvalidOffsetError(f"offsets must be a non-negative int or an iterable of "
                                 f"them, got {offsets!r}")
    if isinstance(offsets, np.ndarray) and offsets.dtype.kind in "iu":
        items = offsets.ravel().tolist()
        if items and min(items) < 0:
            raise InvalidOffsetError(f"offsets must be non-negative, got {min(items)}")
        return items
    try:
        items = list(offsets)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidOffsetError(f"offsets must be a non-negative int or an iterable of "
                                 f"them, got {offsets!r}") from None
    out = list(map(as_offset, items))
    if None in out:
        bad = items[out.index(None)]
        raise InvalidOffsetError(f"offsets must be non-negative ints, got {bad!r}")
    return out  # type: ignore[return-value]


def as_delivery_key(x: object) -> DeliveryKey | None:
    """A DeliveryKey (or a (deliver_after, offset) tuple) with both fields checked and made
    plain ints; None if `x` is not a tuple at all. A tuple that is not two valid fields
    raises KdelayError: a malformed key must never reach a comparison or a file."""
    if not isinstance(x, tuple):
        return None
    if len(x) != 2:
        raise KdelayError(f"a DeliveryKey has two fields (deliver_after, offset), got {x!r}")
    da, off = x
    if type(da) is int and type(off) is int and 0 <= da <= MAX_INT64 \
            and 0 <= off <= MAX_INT64:
        return x if type(x) is DeliveryKey else DeliveryKey(da, off)
    return DeliveryKey(as_time(da, "DeliveryKey.deliver_after"),
                       as_time(off, "DeliveryKey.offset"))


def commit_key(key: object) -> DeliveryKey | None:
    """`Log.commit`'s key: None (the start) or what as_delivery_key accepts."""
    if key is None:
        return None
    as_key = as_delivery_key(key)
    if as_key is None:
        raise KdelayError(f"commit needs a DeliveryKey, got {key!r}")
    return as_key


def check_page_limits(max_records: object, max_bytes: object = 1,
                      max_wait_ms: object = 0) -> tuple[int, int, int]:
    """The page limits as plain ints: max_records and max_bytes >= 1, max_wait_ms >= 0
    (any size: they are counts, never stored)."""
    if type(max_records) is int and type(max_bytes) is int and type(max_wait_ms) is int \
            and max_records > 0 and max_bytes > 0 and max_wait_ms >= 0:
        return max_records, max_bytes, max_wait_ms
    return (as_int(max_records, "max_records", lo=1, hi=1 << 64),
            as_int(max_bytes, "max_bytes", lo=1, hi=1 << 64),
            as_int(max_wait_ms, "max_wait_ms", lo=0, hi=1 << 64))


def requested_deliver_after(record_das: Sequence[int | None], deliver_after: object, *,
                            delayed_delivery_enable: bool, path: str) -> int | None:
    """The deliverAfter a batch asks for: `deliver_after`, else the largest of its
    records', else None (deliver at append time)."""
    if deliver_after is not None:
        deliver_after = as_time(deliver_after, "deliver_after", InvalidRecordError)
    has_record_da = record_das.count(None) != len(record_das)
    if not delayed_delivery_enable and (deliver_after is not None or has_record_da):
        raise DelayedDeliveryDisabledError(
            f"log {path} has delayed_delivery_enable=False; deliver_after refused")
    if deliver_after is None and has_record_da:
        if None not in record_das:
            return max(cast(Sequence[int], record_das))
        return max(d for d in record_das if d is not None)
    return deliver_after


def reschedule_args(offset: object, deliver_after: object, delay_ms: object,
                    now: Callable[[], int], config: LogConfig, path: str) -> tuple[int, int]:
    """`Log.reschedule`'s (offset, deliver_after), both non-negative ints; with `delay_ms`,
    deliver_after is the log clock `now()` plus it (deliver_after_for_delay)."""
    if delay_ms is not None:
        deliver_after = deliver_after_for_delay(deliver_after, delay_ms, now(),
                                                error=KdelayError)
    off, due = as_offset(offset), as_offset(deliver_after)
    if off is None or due is None:
        raise InvalidOffsetError(f"reschedule needs a non-negative int offset and "
                                 f"deliver_after, got {offset!r}, {deliver_after!r}")
    requested_deliver_after((None,), due, path=path,
                            delayed_delivery_enable=config.delayed_delivery_enable)
    return off, due


def check_delay_limit(limit: int, requested: int | None, stamps: list[int] | None,
                      now: int) -> None:
    """Refuse a batch in which some record would wait more than `limit` ms (0: no limit)
    after its own timestamp: every record is delivered at the batch's requested
    deliverAfter, however it was asked for (per record or for the batch), so the delay that
    counts is that minus the earliest timestamp (`stamps` None: all are `now`)."""
    if not limit or requested is None:
        return
    delay = requested - (now if stamps is None else int(np.min(stamps)))
    if delay > limit:
        raise DeliveryDelayExceededError(
            f"requested delivery delay of {delay} ms exceeds max_delivery_delay_ms="
            f"{limit} ms")


def time_after(now: int, delay: int, what: str, error: type[KdelayError] = KdelayError
               ) -> int:
    """`now` plus `delay` ms (an int >= 0 already, named `what`): a time that a file holds
    as an int64, or that is compared with one. A sum past 2**63 - 1 is refused with
    `error`, never clamped."""
    if delay > MAX_INT64 - now:
        raise error(f"{what}={delay} takes the time past {MAX_INT64} (it is {now} now)")
    return now + delay


def deliver_after_for_delay(deliver_after: object, delay_ms: object, now: int, *,
                            error: type[KdelayError] = InvalidRecordError) -> int:
    """The deliverAfter a relative `delay_ms` asks for: `now` (the log clock at the call)
    plus `delay_ms`. Giving an absolute `deliver_after` as well, or a `delay_ms` that is not
    a non-negative int, or one that takes the time past 2**63 - 1, raises `error`."""
    if deliver_after is not None:
        raise error("give deliver_after or delay_ms, not both")
    if type(delay_ms) is int and 0 <= delay_ms <= MAX_INT64 - now:  # per record: one test
        return now + delay_ms
    return time_after(now, as_int(delay_ms, "delay_ms", error=error), "delay_ms", error)
