"""The batch an append writes, checked and held as columns: `BatchColumns`, made from
Records (`record_columns`), from columns a producer holds already (`batch_columns`, with
PackedBinary values and keys), or one record at a time (`record_fields`, a Producer's
send). Every check raises InvalidRecordError before anything is written; the batch
builder (builder.pyx) encodes what these return. The single-value rules (ints, times) are
kdelay.validation's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import numpy as np

from ...errors import InvalidRecordError
from ...records import Header, PackedBinary, Record
from ...validation import MAX_INT64, as_time

_NONE_TYPE = type(None)
_new_tuple = tuple.__new__


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
