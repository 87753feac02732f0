"""Turn a validated batch (kdelay.validation.BatchColumns, or a RecordsBatch the compiled
builder checked) into the bytes the active segment appends: timestamps filled in from the
log clock, the delay limit checked, the batch deliverAfter settled, the batch encoded
(kdelay.log.batch.codec, or records_batch.pyx in one C pass) and its size checked. Raises
InvalidRecordError (or a subclass) and writes nothing. O(records)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...config import LogConfig
from ...errors import InvalidRecordError
from ...validation import BatchColumns, check_delay_limit, record_columns
from . import codec
from .records_batch import RecordsBatch
from .walker import HEADER_LAYOUT


def _stamps(timestamps, now: int) -> tuple[np.ndarray | None, int]:
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


def build_batch(columns: BatchColumns | RecordsBatch, *, base_offset: int, now: int,
                requested: int | None, config: LogConfig) -> BuiltBatch:
    """`requested` is the deliverAfter the batch asks for (validation.requested_deliver_after),
    however it was asked for: the delay limit applies to it alike."""
    batch_da = now if requested is None or requested < now else requested
    if type(columns) is RecordsBatch:
        if config.max_delivery_delay_ms:  # (its earliest timestamp is a pass over the batch)
            check_delay_limit(config.max_delivery_delay_ms, requested, None,
                              columns.earliest(now))
        data = columns.encode(now, base_offset, batch_da, HEADER_LAYOUT, codec.HEADER_TEMPLATE)
        if data is not None:  # (BuiltBatch without its Python-level __new__: every append)
            if len(data) > config.max_batch_bytes:
                _too_big(data, config)
            return tuple.__new__(BuiltBatch, (data, columns.n, batch_da, columns.max_timestamp))
        columns = record_columns(columns.records)  # too long for the compiled builder
    stamps, base_ts = _stamps(columns.timestamps, now)
    check_delay_limit(config.max_delivery_delay_ms, requested, stamps, now)
    data = codec.encode_batch(
        base_offset=base_offset, base_timestamp=base_ts, deliver_after=batch_da,
        keys=columns.keys, values=columns.values,
        timestamp_deltas=None if stamps is None else stamps - base_ts,
        headers=columns.headers)  # the codec treats all-empty headers as none
    if len(data) > config.max_batch_bytes:
        _too_big(data, config)
    return BuiltBatch(data, len(columns.deliver_afters), batch_da, codec.max_timestamp(data))


def _too_big(data: bytes, config: LogConfig) -> None:
    raise InvalidRecordError(f"batch of {len(data)} bytes exceeds max_batch_bytes "
                             f"({config.max_batch_bytes})")
