"""Argument checks shared by the facade and the clients: ints, offsets, keys and whole
batches. Every check raises a KdelayError (InvalidRecordError for a batch) before anything
is written.

One rule for every time, offset and count: an `int` or a numpy integer is accepted (and
handed on as a plain `int`, so nothing downstream ever sees a numpy scalar: fixed-width
arithmetic would overflow, and the group and marker files would hold what their readers
refuse); bool, float, str, None (where not optional) and anything else is refused. Times
and offsets must fit the on-disk int64 fields: 0 <= value < 2**63.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeGuard, cast

import numpy as np

from .config import LogConfig
from .errors import (
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    InvalidOffsetError,
    InvalidRecordError,
    KdelayError,
)
from .records import DeliveryKey, Header, PackedBinary, Record

_NONE_TYPE = type(None)
_new_tuple = tuple.__new__
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


def os_errors(what: str, path: str, call: Callable):
    """Run `call()`; an OSError it raises (EIO, ENOSPC, ENOTDIR, EACCES...) surfaces as
    LogWriteError, a KdelayError keeping errno and filename."""
    from .errors import LogWriteError
    try:
        return call()
    except OSError as e:
        if isinstance(e, KdelayError):
            raise
        raise LogWriteError(e.errno, f"{what} {path} failed: {e.strerror or e}",
                            e.filename) from e


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


def _all_of_types(items, exact: set, allowed) -> bool:
    """True if every item is an instance of `allowed`; the common case (exact types) is
    decided by one C-level pass over the items."""
    return set(map(type, items)) <= exact or all(isinstance(x, allowed) for x in items)


_BYTES_OR_NONE = {bytes, _NONE_TYPE}


def check_headers(hs) -> None:
    if not isinstance(hs, (list, tuple)):
        raise InvalidRecordError("record headers must be a list of (str, bytes|None)")
    for h in hs:
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)
                and (h[1] is None or isinstance(h[1], bytes))):
            raise InvalidRecordError(f"bad header {h!r}: want (str, bytes | None)")
        if not h[0].isascii():
            try:
                h[0].encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidRecordError(
                    f"header key {h[0]!r} cannot be encoded as UTF-8") from None


class BatchColumns(NamedTuple):
    """A checked batch, column by column: what `record_columns` and `batch_columns`
    return and the batch builder encodes. One entry per record in each column (a
    PackedBinary holds a whole column of values or keys; `headers` None: no headers at
    all; `timestamps` None for a record means the append time, and an int64 array comes
    with PackedBinary values); `deliver_afters` are the records' own (None: none asked)."""

    values: Sequence[bytes | None] | PackedBinary
    keys: Sequence[bytes | None] | PackedBinary
    headers: Sequence[Sequence[Header]] | None
    timestamps: Sequence[int | None] | np.ndarray | None
    deliver_afters: Sequence[int | None]


def record_columns(records: Record | Sequence[Record]) -> BatchColumns:
    """Validate a batch (one Record is a batch of one) and transpose it into columns with
    C-level loops: one type check per column, not per field. O(records)."""
    if not isinstance(records, (list, tuple)):
        raise InvalidRecordError(f"records must be a Record or a list or tuple of them, "
                                 f"got {type(records).__name__}"
                                 + ("; wrap a value as Record(value)"
                                    if isinstance(records, (bytes, bytearray, memoryview))
                                    else ""))
    if not records:
        raise InvalidRecordError("an empty batch cannot be appended")
    if not _all_of_types(records, {Record}, Record):
        # one Record (a tuple of its fields) is told apart only here, off the hot path
        if isinstance(records, Record):
            return record_columns((records,))
        raise InvalidRecordError("every item of records must be a kdelay.Record")
    values, keys, headers, timestamps, das = zip(*records, strict=False)  # five fields each
    return _checked(values, keys, headers, timestamps, das)


def record_fields(value: object, key: object, headers: object, timestamp: object,
                  deliver_after: object) -> tuple[tuple[Header, ...], int | None, int | None]:
    """One record checked by the rules `record_columns` applies to each record of a batch,
    without building the batch (a Producer's `send`): returns its headers as a tuple (a
    list changed later changes nothing), its timestamp and deliverAfter (plain ints or
    None). Raises InvalidRecordError."""
    if type(value) in _BYTES_OR_NONE and type(key) in _BYTES_OR_NONE and not headers \
            and timestamp is None and deliver_after is None:
        return (), None, None  # the common shape, which the rules accept as it is
    cols = _checked((value,), (key,), (headers,), (timestamp,), (deliver_after,))
    # checked by _checked: a sequence of headers; a tuple of one time (never None, the
    # packed-column case)
    return (tuple(cast(Sequence[Header], headers or ())), cast(tuple, cols.timestamps)[0],
            cols.deliver_afters[0])


def batch_columns(values: Sequence | PackedBinary, keys: Sequence | PackedBinary | None = None,
                  timestamps: Sequence | np.ndarray | None = None) -> BatchColumns:
    """Validate a batch given as columns (as `record_columns` does records): `values`
    (bytes or None each), `keys` and `timestamps` (None: all None), no headers or record
    deliverAfters. For producers that hold columns already (the Spark writer): no Record
    per row is built, and none taken apart again. O(records).

    `values` (and then `keys`) may also be PackedBinary, and `timestamps` then an int
    array: checked with a few numpy calls, with no Python per row; the columns come back
    as PackedBinary values and keys, no headers, and an int64 array of timestamps (or
    None)."""
    if isinstance(values, PackedBinary):
        return _packed_columns(values, keys, timestamps)
    if not isinstance(values, (list, tuple)):
        raise InvalidRecordError(f"values must be a list or tuple, got {type(values).__name__}")
    n = len(values)
    if not n:
        raise InvalidRecordError("an empty batch cannot be appended")
    cols = [tuple(values)]
    for name, col in (("keys", keys), ("timestamps", timestamps)):
        if col is None:
            cols.append((None,) * n)
        elif not isinstance(col, (list, tuple)) or len(col) != n:
            raise InvalidRecordError(f"{name} must be a list or tuple as long as values")
        else:
            cols.append(tuple(col))
    values, keys, timestamps = cols
    return _checked(values, keys, ((),) * n, timestamps, (None,) * n)


def _packed(col: object, name: str, n: int | None) -> PackedBinary:
    """A PackedBinary checked and normalised: int64 lengths in [-1, len(data)] (-1: null)
    adding up exactly to the uint8 data. Every bound is checked on the values as Python
    ints (an unsigned 2**64 - 1 is not a null, and no sum may wrap around), so the
    compiled encoder only ever sees lengths that index within the data."""
    if not isinstance(col, PackedBinary):
        raise InvalidRecordError(f"{name} must be a PackedBinary like values")
    try:
        lengths = np.asarray(col.lengths)
    except (TypeError, ValueError, OverflowError):
        lengths = None
    if lengths is None or lengths.ndim != 1 or lengths.dtype.kind not in "iu" or (
            n is not None and len(lengths) != n):
        raise InvalidRecordError(f"{name}.lengths must be a 1-D integer array, one per row")
    data = col.data
    try:
        if not isinstance(data, np.ndarray):
            data = np.frombuffer(data, dtype=np.uint8)
        elif data.dtype != np.uint8 or data.ndim != 1:
            data = data.reshape(-1).view(np.uint8)
    except (TypeError, ValueError):
        raise InvalidRecordError(f"{name}.data must be bytes or a buffer of bytes") from None
    if not len(lengths):
        raise InvalidRecordError("an empty batch cannot be appended")
    size = len(data)
    low, high = int(lengths.min()), int(lengths.max())
    if low < -1 or high > size:
        raise InvalidRecordError(f"{name}: every length must be in [-1, {size}] (-1 for null, "
                                 f"else at most the bytes of data), got {low}..{high}")
    lengths = lengths.astype(np.int64, copy=False)  # exact: each is in [-1, size]
    total = _exact_sum(lengths, high)
    if low == -1:
        total += int(np.count_nonzero(lengths == -1))  # nulls count no bytes
    if total != size:
        raise InvalidRecordError(f"{name}: the lengths of the non-null values add up to "
                                 f"{total}, not the {size} bytes of data")
    return PackedBinary(lengths, data)


def _exact_sum(values: np.ndarray, bound: int) -> int:
    """The sum of int64 `values`, each in [-1, bound], as an exact Python int: numpy adds
    chunks short enough that no partial sum can pass 2**63 (usually the whole array)."""
    step = MAX_INT64 // max(bound, 1)
    if len(values) <= step:
        return int(values.sum())
    return sum(int(values[i:i + step].sum()) for i in range(0, len(values), step))


def _packed_columns(values: PackedBinary, keys: object, timestamps: object) -> BatchColumns:
    values = _packed(values, "values", None)
    n = len(values.lengths)
    keys = PackedBinary(np.full(n, -1, np.int64), values.data[:0]) if keys is None \
        else _packed(keys, "keys", n)
    if timestamps is not None:
        ts = np.asarray(timestamps) if isinstance(timestamps, np.ndarray) else None
        if ts is None or ts.dtype.kind not in "iu":  # a sequence: the per-row checks
            if not isinstance(timestamps, (list, tuple)):
                raise InvalidRecordError("timestamps must be an int array, list or tuple")
            col = _time_column(tuple(timestamps), "timestamp")
            if None in col:
                raise InvalidRecordError("PackedBinary batches take no null timestamps")
            ts = np.array(col, dtype=np.int64)
        if ts.shape != (n,):
            raise InvalidRecordError("timestamps must hold one per row")
        if int(ts.min()) < 0 or int(ts.max()) > MAX_INT64:
            raise InvalidRecordError(f"record timestamps must be in [0, {MAX_INT64}]")
        timestamps = ts.astype(np.int64, copy=False)
    return BatchColumns(values, keys, None, timestamps, (None,) * n)


def _checked(values: tuple, keys: tuple, headers: tuple, timestamps: tuple, das: tuple
             ) -> BatchColumns:
    """Check the five columns of a batch of tuples."""
    if not _all_of_types(values, _BYTES_OR_NONE, (bytes, _NONE_TYPE)):
        raise InvalidRecordError("every record value must be bytes or None (a tombstone)")
    if not _all_of_types(keys, _BYTES_OR_NONE, (bytes, _NONE_TYPE)):
        raise InvalidRecordError("every record key must be bytes or None")
    if any(headers):
        first = headers[0]
        if headers.count(first) == len(headers):  # one header set on every record: check once
            check_headers(first)
        else:
            for hs in headers:
                if hs:
                    check_headers(hs)
    # = BatchColumns(...), without the Python-level __new__ of a NamedTuple (on every append)
    return _new_tuple(BatchColumns, (values, keys, headers, _time_column(timestamps, "timestamp"),
                                     _time_column(das, "deliver_after")))


def _time_column(col: tuple, name: str) -> tuple:
    """A column of per-record times (None or a time), checked, numpy ints made plain ints.
    The common cases (all None; plain ints) cost a few C-level passes."""
    nones = col.count(None)
    if nones == len(col):
        return col
    kinds = set(map(type, col))
    if not nones and kinds == {int}:  # the common case: C-level passes only
        if min(col) >= 0 and max(col) <= MAX_INT64:
            return col
    elif kinds <= {int, _NONE_TYPE}:
        present = [v for v in col if v is not None]
        if min(present) >= 0 and max(present) <= MAX_INT64:
            return col
    return tuple(None if v is None else as_time(v, f"record {name}", InvalidRecordError)
                 for v in col)


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


def reschedule_args(offset: object, deliver_after: object, *, delayed_delivery_enable: bool,
                    path: str) -> tuple[int, int]:
    """`Log.reschedule`'s (offset, deliver_after), both non-negative ints."""
    off, due = as_offset(offset), as_offset(deliver_after)
    if off is None or due is None:
        raise InvalidOffsetError(f"reschedule needs a non-negative int offset and "
                                 f"deliver_after, got {offset!r}, {deliver_after!r}")
    requested_deliver_after((None,), due, path=path,
                            delayed_delivery_enable=delayed_delivery_enable)
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
