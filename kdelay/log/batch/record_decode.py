"""Decoding the records section of a v2 batch of any shape (the encoder is record_encode.py).

Every shape takes the same path: a compiled walk over the records (record_loops.pyx) and a
constant number of C-level calls per batch. Header blocks are decoded once per distinct
byte string (a retry header repeats on every record of a batch, and across batches).
"""

from __future__ import annotations

import struct

import numpy as np

from ...records import SharedHeaders
from . import record_loops, varint
from .record_encode import HEADER_SIZE

# ---------------------------------------------------------------------------- decoding


_HD: dict[bytes, SharedHeaders] = {}  # header block bytes -> decoded headers
_HD_LIMIT = 4096


def shared_headers(block: bytes) -> SharedHeaders:
    """The decoded headers of one record's header block (count included), cached by the
    block's bytes: one read-only list shared by every record that carries those headers
    (a retry header repeats on every record of a batch, and across batches)."""
    hs = _HD.get(block)
    if hs is None:
        hs = SharedHeaders(decode_header_block(block))
        if len(_HD) > _HD_LIMIT:
            _HD.clear()
        _HD[block] = hs
    return hs


def decode_header_block(block: bytes) -> tuple:
    """The (key, value) pairs of one header block (count included). ValueError/IndexError
    on malformed bytes."""
    count, pos = varint.decode_one(block, 0)
    end = len(block)
    if count < 0 or count * 2 > end - pos:  # each header takes at least two bytes
        raise ValueError("header count out of range")
    out = []
    for _ in range(count):
        klen, pos = varint.decode_one(block, pos)
        if klen < 0 or klen > end - pos:
            raise ValueError("bad header key length")
        key = block[pos:pos + klen].decode("utf-8")
        pos += klen
        vlen, pos = varint.decode_one(block, pos)
        if vlen < -1 or vlen > end - pos:
            raise ValueError("bad header value length")
        if vlen < 0:
            value = None
        else:
            value = block[pos:pos + vlen]
            pos += vlen
        out.append((key, value))
    if pos != end:
        raise ValueError("record length disagrees with its headers")
    return tuple(out)


def decode_records(data: bytes, n: int, end: int, base_ts: int, no_headers: list
                   ) -> tuple[list, list, list, list]:
    """(timestamps, keys, values, headers) of the records of a batch of n records whose
    bytes (from the header on) are `data[:end]`. Raises ValueError on malformed input.

    One compiled walk over the records (record_loops.scan_records), then a constant number of
    C-level calls: one struct unpack cuts every key and value, one more every header block."""
    size, f1, f2 = record_loops.scan_layout(n)
    out = np.empty(size, np.uint8).data  # its bytes: what struct and the walk both take
    status, fmt1_len, fmt2_len, null_keys, null_values, with_headers = \
        record_loops.scan_records(data, HEADER_SIZE, n, end, base_ts, out, f1, f2)
    if status < 0:
        raise ValueError(record_loops.STATUS_MESSAGES[status])
    # before f1, 4n int64s: read with struct (cheaper than numpy views for a batch's few
    # dozen values)
    fields = struct.unpack_from(out[f1:f1 + fmt1_len].tobytes(), data, HEADER_SIZE)
    keys = list(fields[0::2])
    values = list(fields[1::2])
    if status & record_loops.NULL_KEYS:
        _set_none(keys, struct.unpack_from(f"{null_keys}q", out, 8 * n), n)
    if status & record_loops.NULL_VALUES:
        _set_none(values, struct.unpack_from(f"{null_values}q", out, 16 * n), n)
    if status & record_loops.TIMESTAMPS_VARY:
        ts = list(struct.unpack_from(f"{n}q", out))
    else:
        ts = [base_ts] * n
    if not status & record_loops.HEADERS:
        return ts, keys, values, [no_headers] * n
    blocks = struct.unpack_from(out[f2:f2 + fmt2_len].tobytes(), data, HEADER_SIZE)
    if status & record_loops.SAME_HEADERS:
        return ts, keys, values, [shared_headers(blocks[0])] * n
    headers = [no_headers] * n
    for i, block in zip(struct.unpack_from(f"{with_headers}q", out, 24 * n), blocks,
                        strict=True):
        headers[i] = shared_headers(block)
    return ts, keys, values, headers


def _set_none(column: list, where: tuple[int, ...], n: int) -> None:
    if len(where) == n:
        column[:] = [None] * n
    else:
        for i in where:
            column[i] = None
