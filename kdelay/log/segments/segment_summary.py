"""The segment summary: what a clean close knows of every sealed local segment, so that
the next clean open needs none of their indexes (they load on first use, as Kafka's
LazyIndex does: DeferredIndexes in log/local/loader.py).

File `segment-summary-checkpoint`, replaced atomically by every clean close (before the
clean-shutdown marker, and trusted only while that marker is present: the first change
after an open removes the marker, so a summary never outlives the state it describes):

    header (16 bytes, little-endian): magic b"KDLYSUM1", rows n (q)
    n rows of 8 int64: base_offset, next_offset, log_bytes, min_deliver_after,
      max_key deliverAfter, max_key offset, max_timestamp, compacted (0/1)
      (min_deliver_after and max_key are NO_KEY for a segment with no batch)
    CRC-32C (uint32) of everything before it

A summary whose checksum fails, or whose segments are not exactly the directory's sealed
local ones, is ignored: the open then loads every index, as without one.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import crc32c
import numpy as np

from ... import fsio

SUMMARY_FILE = "segment-summary-checkpoint"
_MAGIC = b"KDLYSUM1"
_HEAD = struct.Struct("<8sq")
_FIELDS = 8
NO_KEY = -(1 << 63)  # min_deliver_after / max_key of a segment with no batch


class SegmentSummary(NamedTuple):
    base_offset: int
    next_offset: int
    log_bytes: int
    min_deliver_after: int | None
    max_key: tuple[int, int] | None
    max_timestamp: int
    compacted: bool


def summary_path(directory: str) -> str:
    return os.path.join(directory, SUMMARY_FILE)


def encode_summaries(rows: list[SegmentSummary]) -> bytes:
    table = np.array([(r.base_offset, r.next_offset, r.log_bytes,
                       NO_KEY if r.min_deliver_after is None else r.min_deliver_after,
                       *((NO_KEY, NO_KEY) if r.max_key is None else r.max_key),
                       r.max_timestamp, int(r.compacted)) for r in rows],
                     dtype="<i8").reshape(len(rows), _FIELDS)
    body = _HEAD.pack(_MAGIC, len(rows)) + table.tobytes()
    return body + struct.pack("<I", crc32c.crc32c(body))


def write_summaries(directory: str, rows: list[SegmentSummary]) -> None:
    """Replace the directory's summary (atomically). O(rows)."""
    fsio.atomic_write(summary_path(directory), encode_summaries(rows))


def read_summaries(directory: str) -> dict[int, SegmentSummary] | None:
    """The summary by base offset; None if it is missing or does not hold (a checksum, a
    size or a field out of range). One small read."""
    raw = fsio.read_small(summary_path(directory))
    if raw is None or len(raw) < _HEAD.size + 4:
        return None
    magic, n = _HEAD.unpack_from(raw)
    if magic != _MAGIC or n < 0 or len(raw) != _HEAD.size + 8 * _FIELDS * n + 4:
        return None
    if crc32c.crc32c(raw[:-4]) != struct.unpack_from("<I", raw, len(raw) - 4)[0]:
        return None
    table = np.frombuffer(raw, "<i8", n * _FIELDS, _HEAD.size).reshape(n, _FIELDS).tolist()
    out = {}
    for base, nxt, size, min_da, max_da, max_off, max_ts, compacted in table:
        if nxt < base or size < 0 or compacted not in (0, 1):
            return None
        empty = min_da == NO_KEY
        out[base] = SegmentSummary(base, nxt, size, None if empty else min_da,
                                   None if empty else (max_da, max_off), max_ts,
                                   bool(compacted))
    return out
