"""The record batch codec: Kafka's v2 RecordBatch with magic 3 and a deliverAfter field.

Layout (API.md, "On disk"): a 69-byte big-endian header, deliverAfter at byte 43, then the
records exactly as Kafka v2 writes them. The CRC-32C covers byte 21 (attributes) to the end.
Encoding and decoding work on whole columns with numpy (see varint.py); the only per-record
Python is what producing or returning Python objects costs anyway.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c
import numpy as np

from ..errors import CorruptLogError
from . import varint

HEADER = struct.Struct(">qiibIhiqqqqhii")
HEADER_SIZE = HEADER.size  # 69
assert HEADER_SIZE == 69
MAGIC = 3
CRC_OFFSET = 17
CRC_START = 21  # the CRC covers attributes .. end of batch
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
DELIVER_AFTER_OFFSET = 43
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
NO_PRODUCER_ID = -1
# attributes: bits 0-2 compression (0 = none), bit 3 timestamp type, 4 transactional, 5 control
UNSUPPORTED_ATTRIBUTES = 0x07 | 0x10 | 0x20
_PAD = 16  # zero bytes after the records so vectorised varint reads never run off the end


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


class RecordColumns(NamedTuple):
    """A batch's records, decoded column-wise."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]


def parse_header(buf, pos: int = 0, *, path: str | None = None, file_pos: int | None = None,
                 available: int | None = None) -> BatchHeader:
    """Parse and sanity-check the header at `buf[pos:]`. `available` is how many bytes the
    batch may span (defaults to the rest of `buf`). Raises CorruptLogError."""
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
    keys: list[bytes | None],
    values: list[bytes | None],
    timestamp_deltas: np.ndarray | None = None,
    headers: list | None = None,
    leader_epoch: int = 0,
) -> bytes:
    """Encode one batch. Keys and values are bytes (or None for null). `timestamp_deltas`
    (int64, relative to base_timestamp) may be None for "all equal". `headers` is None when
    no record has any, else one sequence of (str, bytes|None) per record."""
    n = len(values)
    if timestamp_deltas is None:
        ts = np.zeros(n, dtype=np.int64)
        max_ts = base_timestamp
    else:
        ts = timestamp_deltas
        max_ts = base_timestamp + int(ts.max())
    klen = _lengths(keys, n)
    vlen = _lengths(values, n)
    if headers is None:
        hblobs = None
        hlen = None
        hcount = np.zeros(n, dtype=np.int64)
    else:
        hblobs = [_encode_headers(h) for h in headers]
        hlen = np.fromiter(map(len, hblobs), dtype=np.int64, count=n)
        hcount = np.fromiter(map(len, headers), dtype=np.int64, count=n)

    # varint columns, in record order: length, attributes, tsDelta, offsetDelta,
    # keyLength, valueLength, headerCount (attributes is a single 0 byte, as a varint 0)
    cols = np.empty((n, 7), dtype=np.int64)
    cols[:, 1] = 0
    cols[:, 2] = ts
    cols[:, 3] = np.arange(n, dtype=np.int64)
    cols[:, 4] = klen
    cols[:, 5] = vlen
    cols[:, 6] = hcount
    u = varint.zigzag(cols)
    sz = varint.sizes(u)
    body = sz[:, 1:].sum(axis=1) + np.maximum(klen, 0) + np.maximum(vlen, 0)
    if hlen is not None:
        body += hlen
    u[:, 0] = varint.zigzag(body)
    sz[:, 0] = varint.sizes(u[:, 0])
    small = varint.encode(u, sz)

    # Interleave the pieces of each record: [varints 0-4][key][varint 5][value][varint 6][headers]
    # as one gather from a single source buffer.
    vstart = np.zeros(7 * n, dtype=np.int64)
    np.cumsum(sz.ravel()[:-1], out=vstart[1:])
    vstart = vstart.reshape(n, 7)
    key_blob = b"".join([k for k in keys if k]) if klen.max(initial=0) > 0 else b""
    val_blob = b"".join([v for v in values if v]) if vlen.max(initial=0) > 0 else b""
    hdr_blob = b"".join(hblobs) if hblobs is not None else b""
    kz = np.maximum(klen, 0)
    vz = np.maximum(vlen, 0)
    key_base = small.shape[0]
    val_base = key_base + len(key_blob)
    hdr_base = val_base + len(val_blob)
    piece_src = np.empty((n, 6), dtype=np.int64)
    piece_len = np.empty((n, 6), dtype=np.int64)
    piece_src[:, 0] = vstart[:, 0]
    piece_len[:, 0] = sz[:, :5].sum(axis=1)
    piece_src[:, 1] = key_base + _exclusive_cumsum(kz)
    piece_len[:, 1] = kz
    piece_src[:, 2] = vstart[:, 5]
    piece_len[:, 2] = sz[:, 5]
    piece_src[:, 3] = val_base + _exclusive_cumsum(vz)
    piece_len[:, 3] = vz
    piece_src[:, 4] = vstart[:, 6]
    piece_len[:, 4] = sz[:, 6]
    if hlen is not None:
        piece_src[:, 5] = hdr_base + _exclusive_cumsum(hlen)
        piece_len[:, 5] = hlen
    else:
        piece_src[:, 5] = 0
        piece_len[:, 5] = 0
    plen = piece_len.ravel()
    out_start = _exclusive_cumsum(plen)
    total = int(out_start[-1] + plen[-1])
    src = np.frombuffer(b"".join((small.tobytes(), key_blob, val_blob, hdr_blob)), dtype=np.uint8)
    idx = np.repeat(piece_src.ravel() - out_start, plen)
    idx += np.arange(total, dtype=np.int64)
    records = src[idx].tobytes()

    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(records)
    tail = struct.pack(">hiqqqqhii", 0, n - 1, base_timestamp, max_ts, deliver_after,
                       NO_PRODUCER_ID, -1, -1, n)
    crc = crc32c.crc32c(records, crc32c.crc32c(tail))
    head = struct.pack(">qiibI", base_offset, batch_length, leader_epoch, MAGIC, crc)
    return b"".join((head, tail, records))


def _lengths(items: list, n: int) -> np.ndarray:
    if None in items:
        return np.fromiter((-1 if x is None else len(x) for x in items), dtype=np.int64, count=n)
    return np.fromiter(map(len, items), dtype=np.int64, count=n)


def _exclusive_cumsum(a: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape[0], dtype=np.int64)
    if a.shape[0] > 1:
        np.cumsum(a[:-1], out=out[1:])
    return out


def _encode_headers(headers) -> bytes:
    parts = []
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        parts.append(varint.encode_one(len(kb)))
        parts.append(kb)
        if hval is None:
            parts.append(varint.encode_one(-1))
        else:
            parts.append(varint.encode_one(len(hval)))
            parts.append(hval)
    return b"".join(parts)


# ---------------------------------------------------------------------------- decoding


def decode_records(batch, header: BatchHeader, *, path: str | None = None,
                   file_pos: int | None = None) -> RecordColumns:
    """Decode the records of one whole batch (`batch` holds exactly its bytes; the CRC is
    assumed checked). Raises CorruptLogError if the records section does not parse to exactly
    `record_count` records filling the batch."""
    where = file_pos
    n = header.record_count
    end = header.size
    mv = memoryview(batch)
    starts = _record_starts(mv, n, end, path, where)
    arr = np.frombuffer(bytes(mv[:end]) + bytes(_PAD), dtype=np.uint8)
    try:
        return _decode_fields(batch, arr, starts, n, header, end)
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptLogError(f"malformed record in batch ({e})", path, where) from None


def _record_starts(mv: memoryview, n: int, end: int, path, where) -> np.ndarray:
    """Start of every record's length varint. The one sequential step of decoding: each
    record's start depends on the previous record's length, so it is a tight Python loop
    that handles the 1- and 2-byte cases inline."""
    starts = [0] * (n + 1)
    pos = HEADER_SIZE
    try:
        for i in range(n):
            starts[i] = pos
            b = mv[pos]
            if b < 0x80:
                if b & 1:
                    raise ValueError("negative record length")
                pos += 1 + (b >> 1)
            else:
                b1 = mv[pos + 1]
                if b1 < 0x80:
                    u = (b & 0x7F) | (b1 << 7)
                    pos += 2 + (u >> 1)
                    if u & 1:
                        raise ValueError("negative record length")
                else:
                    length, npos = varint.decode_one(mv, pos)
                    if length < 0:
                        raise ValueError("negative record length")
                    pos = npos + length
    except (IndexError, ValueError) as e:
        raise CorruptLogError(f"malformed record framing ({e})", path, where) from None
    if pos != end:
        raise CorruptLogError(
            f"records fill {pos} bytes but the batch has {end}", path, where)
    starts[n] = end
    return np.array(starts, dtype=np.int64)


def _decode_fields(batch, arr: np.ndarray, starts: np.ndarray, n: int, header: BatchHeader,
                   end: int) -> RecordColumns:
    rec_start = starts[:-1]
    rec_end = starts[1:]
    _, lsize = varint.decode_at(arr, rec_start)
    pos = rec_start + lsize + 1  # skip the length and the attributes byte
    ts_delta, s = varint.decode_at(arr, pos)
    pos = pos + s
    off_delta, s = varint.decode_at(arr, pos)
    pos = pos + s
    if not np.array_equal(off_delta, np.arange(n)):
        raise ValueError("offset deltas are not 0..n-1")
    klen, s = varint.decode_at(arr, pos)
    kpos = pos + s
    kend = kpos + np.maximum(klen, 0)
    vlen, s = varint.decode_at(arr, kend)
    vpos = kend + s
    vend = vpos + np.maximum(vlen, 0)
    hcount, s = varint.decode_at(arr, vend)
    hpos = vend + s
    if (klen < -1).any() or (vlen < -1).any() or (hcount < 0).any():
        raise ValueError("negative length")
    if (hpos > rec_end).any():
        raise ValueError("record fields overrun the record")
    data = bytes(batch[:end]) if not isinstance(batch, bytes) else batch
    keys = _slices(data, kpos, kend, klen)
    values = _slices(data, vpos, vend, vlen)
    if hcount.any():
        headers = [_decode_headers(data, int(p), int(c), int(e))
                   for p, c, e in zip(hpos, hcount, rec_end, strict=True)]
    else:
        if (hpos != rec_end).any():
            raise ValueError("record length disagrees with its fields")
        headers = [[] for _ in range(n)]
    timestamps = (ts_delta + header.base_timestamp).tolist()
    return RecordColumns(timestamps, keys, values, headers)


def _slices(data: bytes, starts: np.ndarray, ends: np.ndarray, lengths: np.ndarray) -> list:
    s = starts.tolist()
    e = ends.tolist()
    out = [data[a:b] for a, b in zip(s, e, strict=True)]
    if (lengths < 0).any():
        for i in np.flatnonzero(lengths < 0).tolist():
            out[i] = None
    return out


def _decode_headers(data: bytes, pos: int, count: int, end: int) -> list:
    out = []
    for _ in range(count):
        klen, pos = varint.decode_one(data, pos)
        if klen < 0:
            raise ValueError("null header key")
        key = data[pos:pos + klen].decode("utf-8")
        pos += klen
        vlen, pos = varint.decode_one(data, pos)
        if vlen < 0:
            value = None
        else:
            value = data[pos:pos + vlen]
            pos += vlen
        if pos > end:
            raise ValueError("header overruns its record")
        out.append((key, value))
    if pos != end:
        raise ValueError("record length disagrees with its headers")
    return out


def to_kafka_v2(batch: bytes) -> bytes:
    """The same batch as a plain Kafka v2 RecordBatch: drop deliverAfter, magic 2, new CRC."""
    h = parse_header(batch)
    body = batch[CRC_START:DELIVER_AFTER_OFFSET] + batch[DELIVER_AFTER_OFFSET + 8: h.size]
    head = struct.pack(">qiibI", h.base_offset, h.batch_length - 8, h.leader_epoch, 2,
                       crc32c.crc32c(body))
    return head + body
