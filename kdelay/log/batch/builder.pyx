# cython: language_level=3
"""Turn a validated batch (kdelay.log.batch.columns.BatchColumns, or a RecordsBatch the compiled
builder checked) into the bytes the active segment appends: timestamps filled in from the
log clock, the delay limit checked, the batch deliverAfter settled, the batch encoded
(kdelay.log.batch.codec, or records_batch.pyx in one C pass) and its size checked. Raises
InvalidRecordError (or a subclass) and writes nothing. O(records).

Compiled, so that the append path (log/local/writer.pyx) builds a RecordsBatch with no
Python call between it and the encoder (`build`, builder.pxd)."""

from typing import NamedTuple

import numpy as np

from libc.stdint cimport INT64_MAX, int64_t

from kdelay.log.batch.batch_header cimport Layout, read_layout
from kdelay.log.batch.records_batch cimport RecordsBatch

from kdelay.errors import InvalidRecordError
from kdelay.log.batch import codec
from kdelay.log.batch.columns import record_columns
from kdelay.validation import check_delay_limit

cdef Layout _LAYOUT  # codec.HEADER_LAYOUT, read once
read_layout(codec.HEADER_LAYOUT, &_LAYOUT)
cdef bytes _TEMPLATE = codec.HEADER_TEMPLATE


def _stamps(timestamps, now: int) -> tuple:
    """(the int64 timestamps, or None when every record takes `now`; the batch's base
    timestamp). `timestamps` is a tuple with None for "now" or an int64 array. The max is
    left to the codec, which finds it while it writes the deltas."""
    if isinstance(timestamps, np.ndarray):  # packed batches: no nulls
        return timestamps, int(timestamps[0])
    if timestamps is None:
        return None, now
    nones = timestamps.count(None)
    if nones == len(timestamps):
        return None, now
    ts = timestamps if not nones else [now if t is None else t for t in timestamps]
    return np.array(ts, dtype=np.int64), ts[0]


class BuiltBatch(NamedTuple):
    data: bytes
    records: int
    deliver_after: int   # the batch's: never below `now`
    max_timestamp: int


def build_batch(columns, int64_t base_offset, int64_t now, requested, config) -> BuiltBatch:
    """`columns`: columns.BatchColumns or a RecordsBatch; `requested` is the deliverAfter
    the batch asks for (validation.requested_deliver_after), however it was asked for: the
    delay limit applies to it alike. `config`: the LogConfig."""
    cdef Built built
    cdef Limits limits
    limits_of(config, &limits)
    data = build(columns, base_offset, now, requested, &limits, &built)
    return BuiltBatch(data, built.records, built.deliver_after, built.max_timestamp)


cdef int limits_of(config, Limits* out) except -1:
    """The LogConfig's limits on a batch (a compiled caller reads them once, not per
    batch: a LogConfig never changes)."""
    cdef object most = INT64_MAX  # (a limit past any int64 is no limit: the same answers)
    out.max_delivery_delay_ms = min(config.max_delivery_delay_ms, most)
    out.max_batch_bytes = min(config.max_batch_bytes, most)
    return 0


cdef bytes build(columns, int64_t base_offset, int64_t now, requested, const Limits* limits,
                 Built* out):
    """build_batch, for compiled callers (the append path): the batch's bytes, and its
    record count, deliverAfter and largest timestamp in *out, with no tuple made."""
    cdef int64_t batch_da = now, asked  # never below the append time
    if requested is not None:
        asked = requested  # (compared in C: no int object made for `now`)
        if asked > now:
            batch_da = asked
    cdef RecordsBatch batch
    if type(columns) is RecordsBatch:
        batch = <RecordsBatch>columns
        if limits.max_delivery_delay_ms:  # (its earliest timestamp is a pass over the batch)
            check_delay_limit(limits.max_delivery_delay_ms, requested, None,
                              batch.earliest(now))
        data = batch.encode_laid_out(now, base_offset, batch_da, &_LAYOUT, _TEMPLATE)
        if data is not None:
            if len(data) > limits.max_batch_bytes:
                _too_big(data, limits.max_batch_bytes)
            out.records, out.deliver_after = batch.n, batch_da
            out.max_timestamp = batch.max_timestamp
            return data
        columns = record_columns(batch.records)  # too long for the compiled builder
    stamps, base_ts = _stamps(columns.timestamps, now)
    check_delay_limit(limits.max_delivery_delay_ms, requested, stamps, now)
    data = codec.encode_batch(
        base_offset=base_offset, base_timestamp=base_ts, deliver_after=batch_da,
        keys=columns.keys, values=columns.values,
        timestamp_deltas=None if stamps is None else stamps - base_ts,
        headers=columns.headers)  # the codec treats all-empty headers as none
    if len(data) > limits.max_batch_bytes:
        _too_big(data, limits.max_batch_bytes)
    out.records, out.deliver_after = len(columns.deliver_afters), batch_da
    out.max_timestamp = codec.max_timestamp(data)
    return data


def _too_big(bytes data, max_batch_bytes) -> None:
    raise InvalidRecordError(f"batch of {len(data)} bytes exceeds max_batch_bytes "
                             f"({max_batch_bytes})")
