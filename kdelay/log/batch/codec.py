"""The record batch codec: Kafka's v2 RecordBatch with magic 3 and a deliverAfter field.

Layout (docs/formats.md, "Record batch"): a 69-byte big-endian header, deliverAfter at byte
43, then the records exactly as Kafka v2 writes them. The CRC-32C covers byte 21 (attributes)
to the end. HEADER's format is the one definition of that header: every field's offset, and
the constants below, are worked out from it.

There are two encoders and two decoders, held equal by tests. Here, for every batch shape:
record_encode.py gathers a batch into flat columns and record_decode.py cuts one apart,
each with a constant number of C-level calls per batch around the per-record loops compiled
from record_loops.pyx. In C, for the hot paths: records_batch.pyx encodes an append's
batch of plain Records in one pass (byte for byte as encode_batch:
tests/log/batch/test_records_batch.py), and the page fill decodes the batches it fetches
(batch_read.pxd: the same records as decode_records, tests/fetch/test_page_fill.py).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c
import numpy as np

from ...errors import CorruptLogError, InvalidRecordError
from ...records import NO_HEADERS, PackedBinary
from . import record_decode, record_encode
from .record_encode import RecordColumns

HEADER = struct.Struct(">qiibIhiqqqqhii")  # one format character per BatchHeader field
HEADER_SIZE = HEADER.size  # 69
assert HEADER_SIZE == 69
MAGIC = 3
# Smallest possible record: length, attributes, tsDelta, offsetDelta, keyLength (-1),
# valueLength (-1), headerCount, one byte each. Bounds record_count by the batch size, so a
# corrupt count can never make a reader allocate or loop beyond what the bytes could hold.
MIN_RECORD_SIZE = 7
NO_PRODUCER_ID = -1
# attributes: bits 0-2 compression (0 = none), bit 3 timestamp type, 4 transactional, 5 control
UNSUPPORTED_ATTRIBUTES = 0x07 | 0x10 | 0x20
# bit 14, kdelay's own (Kafka leaves bits 7-15 unused): more stored batches of the same
# client batch follow this one (client_batch.pyx). Recovery cuts a log whose last batch
# has it back to where that client batch began, so a client batch is all there or none of
# it; the broker clears it in what it serves.
MORE_RUNS = 0x4000


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    deliver_after: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes in the .log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


# where each header field starts in a batch, worked out from HEADER's format
FIELD_OFFSETS = {name: struct.calcsize(HEADER.format[:i + 1]) for i, name in
                 enumerate(BatchHeader._fields)}
MAGIC_OFFSET = FIELD_OFFSETS["magic"]
CRC_OFFSET = FIELD_OFFSETS["crc"]
CRC_START = FIELD_OFFSETS["attributes"]  # the CRC covers attributes .. end of batch
DELIVER_AFTER_OFFSET = FIELD_OFFSETS["deliver_after"]
# baseOffset + batchLength: the bytes batchLength does not count
LOG_OVERHEAD = FIELD_OFFSETS["leader_epoch"]
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# the header either side of CRC_START: what the CRC does not cover, and what it does
_SPLIT = 1 + BatchHeader._fields.index("attributes")  # HEADER.format[0] is the byte order
_HEAD = struct.Struct(HEADER.format[:_SPLIT])
_TAIL = struct.Struct(HEADER.format[0] + HEADER.format[_SPLIT:])
# what the compiled readers and writers (batch_header.pxd reads it, in this order) need of
# the layout, passed in: they keep no copy of it of their own
HEADER_LAYOUT = np.array(
    [HEADER_SIZE, LOG_OVERHEAD, MIN_RECORD_SIZE, MAGIC, *(FIELD_OFFSETS[name] for name in (
        "base_offset", "batch_length", "magic", "crc", "last_offset_delta", "base_timestamp",
        "max_timestamp", "deliver_after", "record_count")), CRC_START], dtype=np.int64)


def parse_header(buf, pos: int = 0, *, path: str | None = None, file_pos: int | None = None,
                 available: int | None = None) -> BatchHeader:
    """Parse and sanity-check the header at `buf[pos:]`. `available` is how many bytes the
    batch may span (defaults to the rest of `buf`). Raises CorruptLogError.
    walker.walk_headers makes the same checks over many headers at once; a test in
    tests/log/batch/test_walker.py holds the two to the same batches and errors."""
    where = file_pos if file_pos is not None else pos
    if available is None:
        available = len(buf) - pos
    if available < HEADER_SIZE:
        raise CorruptLogError(f"truncated batch header ({available} of {HEADER_SIZE} bytes)",
                              path, where)
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptLogError(f"bad magic byte {h.magic} (expected {MAGIC})", path, where)
    if h.batch_length < MIN_BATCH_LENGTH:
        raise CorruptLogError(f"batchLength {h.batch_length} is too small", path, where)
    if h.size > available:
        raise CorruptLogError(
            f"truncated batch: batchLength says {h.size} bytes, {available} remain", path, where)
    if h.record_count <= 0 or h.last_offset_delta != h.record_count - 1:
        raise CorruptLogError(
            f"record count {h.record_count} disagrees with lastOffsetDelta {h.last_offset_delta}",
            path, where)
    if h.record_count * MIN_RECORD_SIZE > h.size - HEADER_SIZE:
        raise CorruptLogError(
            f"record count {h.record_count} cannot fit in {h.size} bytes", path, where)
    if h.base_offset < 0:
        raise CorruptLogError(f"negative base offset {h.base_offset}", path, where)
    return h


def crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    view = memoryview(buf)[pos + CRC_START: pos + header.size]
    return crc32c.crc32c(view) == header.crc


def check_crc(buf, pos: int, header: BatchHeader, *, path: str | None = None,
              file_pos: int | None = None) -> None:
    if not crc_ok(buf, pos, header):
        raise CorruptLogError("CRC-32C mismatch", path, file_pos if file_pos is not None else pos)


# ---------------------------------------------------------------------------- encoding


def encode_batch(
    *,
    base_offset: int,
    base_timestamp: int,
    deliver_after: int,
    keys: Sequence[bytes | None] | PackedBinary,
    values: Sequence[bytes | None] | PackedBinary,
    timestamp_deltas: Sequence[int] | np.ndarray | None = None,
    headers: Sequence | None = None,
    leader_epoch: int = 0,
) -> bytes:
    """Encode one batch. Keys and values are bytes (or None for null) each, or both
    PackedBinary (lengths checked: columns._packed). `timestamp_deltas` (relative to
    base_timestamp) may be None for "all equal". `headers` is None when no record has any,
    else one sequence of (str, bytes|None) per record."""
    n = len(values.lengths) if isinstance(values, PackedBinary) else len(values)
    nk = len(keys.lengths) if isinstance(keys, PackedBinary) else len(keys)
    if n == 0 or nk != n or (headers is not None and len(headers) != n):
        raise InvalidRecordError("a batch needs one key and one value per record, and at "
                                 "least one record")
    if timestamp_deltas is None:
        ts = None
    else:
        if not isinstance(timestamp_deltas, np.ndarray) and not (
                set(map(type, timestamp_deltas)) <= _INT_TYPES
                or all(map(_is_int, timestamp_deltas))):
            raise InvalidRecordError("timestamp_deltas needs one int per record")
        ts = np.asarray(timestamp_deltas, dtype=np.int64)
        if ts.shape != (n,):
            raise InvalidRecordError("timestamp_deltas needs one entry per record")
    if headers is not None and not any(headers):
        headers = None

    out, max_delta = record_encode.encode_batch_body(keys, values, ts, headers)
    max_ts = base_timestamp + max_delta
    batch_length = len(out) - LOG_OVERHEAD
    _TAIL.pack_into(out, CRC_START, 0, n - 1, base_timestamp, max_ts, deliver_after,
                    NO_PRODUCER_ID, -1, -1, n)
    crc = crc32c.crc32c(memoryview(out)[CRC_START:])
    _HEAD.pack_into(out, 0, base_offset, batch_length, leader_epoch, MAGIC, crc)
    return bytes(out)


# the header of a batch this codec writes, for the compiled builder (records_batch.pyx), which
# writes the fields a batch varies in (at HEADER_LAYOUT's offsets) over those of this
# one and keeps the rest: leader epoch 0, magic, no attributes, no producer
HEADER_TEMPLATE = encode_batch(base_offset=0, base_timestamp=0, deliver_after=0, keys=[None],
                               values=[None])[:HEADER_SIZE]


def max_timestamp(batch: bytes) -> int:
    """The maxTimestamp field of an encoded batch (what encode_batch worked out)."""
    return _INT64.unpack_from(batch, FIELD_OFFSETS["max_timestamp"])[0]


_INT64 = struct.Struct(">q")
_INT_TYPES = {int, np.int64}


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


# ---------------------------------------------------------------------------- decoding


def decode_records(batch, header: BatchHeader, *, path: str | None = None,
                   file_pos: int | None = None) -> RecordColumns:
    """Decode the records of one whole batch (`batch` holds its bytes from the header on; the
    CRC is assumed checked). Raises CorruptLogError, and nothing else, if the records section
    does not parse to exactly `record_count` records filling the batch."""
    n = header.record_count
    end = header.size
    data = batch if isinstance(batch, bytes) else bytes(memoryview(batch)[:end])
    if len(data) < end or end < HEADER_SIZE or n <= 0 or n * MIN_RECORD_SIZE > end - HEADER_SIZE:
        raise CorruptLogError(f"batch of {end} bytes cannot hold {n} records", path, file_pos)
    try:
        return RecordColumns(*record_decode.decode_records(data, n, end, header.base_timestamp,
                                                      NO_HEADERS))
    except (IndexError, ValueError) as e:  # a malformed header block; UnicodeDecodeError
        # is a ValueError
        raise CorruptLogError(f"malformed record in batch ({e})", path, file_pos) from None
