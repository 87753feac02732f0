"""Decoding the records section of a v2 batch of any shape (the encoder is sections.py).

The one sequential step is walking the record lengths (each record's start depends on the
previous record's length: a tight Python loop); every other field is then a numpy column
(all-1-byte columns by table lookup, else varint.decode_at), payloads are cut with one
C-level map per column, and header blocks are decoded once per distinct byte string. Under
SMALL_BATCH records a single Python pass is cheaper than numpy's per-call costs.
"""

from __future__ import annotations

import numpy as np

from . import varint
from .sections import _PAD, HEADER_SIZE, MIN_RECORD_SIZE, SMALL_BATCH

# ---------------------------------------------------------------------------- decoding


_HD: dict[bytes, tuple] = {}  # header block bytes -> decoded headers (a tuple of pairs)
_HD_LIMIT = 4096


def _header_list(block: bytes) -> list:
    """The decoded headers of one record's header block (count included), cached by the
    block's bytes; a fresh list each time (callers may change it)."""
    hs = _HD.get(block)
    if hs is None:
        hs = decode_header_block(block)
        if len(_HD) > _HD_LIMIT:
            _HD.clear()
        _HD[block] = hs
    return list(hs)


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


def decode_small(data: bytes, n: int, end: int, base_ts: int, no_headers: list
                 ) -> tuple[list, list, list, list]:
    """(timestamps, keys, values, headers) of a few records: one Python pass. Raises
    IndexError/ValueError on malformed input."""
    timestamps = [base_ts] * n
    keys: list = [None] * n
    values: list = [None] * n
    headers: list = [no_headers] * n
    decode_one = varint.decode_one
    pos = HEADER_SIZE
    for i in range(n):
        b = data[pos]
        if b < 0x80:
            length = b >> 1 if not b & 1 else -1
            pos += 1
        else:
            length, pos = decode_one(data, pos)
        rend = pos + length
        if length < MIN_RECORD_SIZE - 1 or rend > end:
            raise ValueError("bad record length")
        p = pos + 1  # attributes: unused in v2, ignored as Kafka does
        b = data[p]
        if b < 0x80:
            if b:
                timestamps[i] = base_ts + ((b >> 1) ^ -(b & 1))
            p += 1
        else:
            d, p = decode_one(data, p)
            timestamps[i] = base_ts + d
        b = data[p]
        if b == i << 1 and b < 0x80:
            p += 1
        else:
            d, p = decode_one(data, p)
            if d != i:
                raise ValueError("offset deltas are not 0..n-1")
        b = data[p]
        if b < 0x80:
            kl = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            kl, p = decode_one(data, p)
        if kl >= 0:
            if kl > rend - p:
                raise ValueError("key length out of range")
            keys[i] = data[p:p + kl]
            p += kl
        elif kl != -1:
            raise ValueError("key length out of range")
        b = data[p]
        if b < 0x80:
            vl = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            vl, p = decode_one(data, p)
        if vl >= 0:
            if vl > rend - p:
                raise ValueError("value length out of range")
            values[i] = data[p:p + vl]
            p += vl
        elif vl != -1:
            raise ValueError("value length out of range")
        if p >= rend:
            raise ValueError("record length disagrees with its fields")
        if data[p] or p + 1 != rend:
            headers[i] = _header_list(data[p:rend])
        pos = rend
    if pos != end:
        raise ValueError(f"records fill {pos} bytes but the batch has {end}")
    return timestamps, keys, values, headers


def _record_starts(data: bytes, n: int, end: int) -> tuple[list[int], list[int]]:
    """Where each record's body starts and where it ends. The one sequential step of
    decoding: each record's start depends on the previous record's length, so it is a tight
    Python loop that handles the 1- and 2-byte length varints inline."""
    bodies = [0] * n
    ends = [0] * n
    pos = HEADER_SIZE
    for i in range(n):
        b = data[pos]
        if b < 0x80:
            if b & 1:
                raise ValueError("negative record length")
            bodies[i] = pos + 1
            pos += 1 + (b >> 1)
        else:
            b1 = data[pos + 1]
            if b1 < 0x80:
                u = (b & 0x7F) | (b1 << 7)
                if u & 1:
                    raise ValueError("negative record length")
                bodies[i] = pos + 2
                pos += 2 + (u >> 1)
            else:
                length, npos = varint.decode_one(data, pos)
                if length < 0:
                    raise ValueError("negative record length")
                bodies[i] = npos
                pos = npos + length
        if pos > end:
            raise ValueError("record overruns the batch")
        ends[i] = pos
    if pos != end:
        raise ValueError(f"records fill {pos} bytes but the batch has {end}")
    return bodies, ends


def _cut(data: bytes, starts: list[int], stops: list[int]) -> list[bytes]:
    return list(map(data.__getitem__, map(slice, starts, stops)))


def _payloads(data: bytes, pos: np.ndarray, lengths: np.ndarray, n: int) -> list:
    """The payload of each record: bytes, or None where the length is -1."""
    lmin = int(lengths.min())
    if lmin == int(lengths.max()):  # one length for the whole column: no per-record ends
        if lmin <= 0:
            return [None] * n if lmin < 0 else [b""] * n
        starts = pos.tolist()
        return _cut(data, starts, (pos + lmin).tolist())
    out = _cut(data, pos.tolist(), (pos + np.maximum(lengths, 0)).tolist())
    if lmin < 0:
        for i in np.flatnonzero(lengths < 0).tolist():
            out[i] = None
    return out


def decode_records(data: bytes, n: int, end: int, base_ts: int, no_headers: list
                   ) -> tuple[list, list, list, list]:
    """(timestamps, keys, values, headers) of the records of a batch of n records whose
    bytes (from the header on) are `data[:end]`. Raises IndexError/ValueError on malformed
    input. Every length is checked against its record's end before it moves a position, so
    positions stay small and increasing (no int64 wrap-around)."""
    if n < SMALL_BATCH:
        return decode_small(data, n, end, base_ts, no_headers)
    return decode_columns(data, n, end, base_ts, no_headers)


def decode_columns(data: bytes, n: int, end: int, base_ts: int, no_headers: list
                   ) -> tuple[list, list, list, list]:
    """decode_records with numpy columns (any batch size; meant for the larger ones)."""
    bodies, ends = _record_starts(data, n, end)
    arr = np.zeros(end + _PAD, dtype=np.uint8)
    arr[:end] = np.frombuffer(data, dtype=np.uint8, count=end)
    rec_end = np.array(ends, dtype=np.int64)
    pos = np.array(bodies, dtype=np.int64)
    if (rec_end - pos < MIN_RECORD_SIZE - 1).any():
        raise ValueError("record too short")
    pos += 1  # the attributes byte (unused in v2, ignored as Kafka does)
    ts_delta, s = _varint_col(arr, pos)
    pos += s
    off_delta, s = _varint_col(arr, pos)
    pos += s
    if not np.array_equal(off_delta, _ARANGE[:n] if n <= len(_ARANGE) else np.arange(n)):
        raise ValueError("offset deltas are not 0..n-1")
    klen, s = _varint_col(arr, pos)
    kpos = pos + s
    if (klen < -1).any() or (klen > rec_end - kpos).any():
        raise ValueError("key length out of range")
    kend = kpos + np.maximum(klen, 0)
    vlen, s = _varint_col(arr, kend)
    vpos = kend + s
    if (vlen < -1).any() or (vlen > rec_end - vpos).any():
        raise ValueError("value length out of range")
    hpos = vpos + np.maximum(vlen, 0)
    # the header block (count + headers) is hpos .. rec_end; b"\x00" when there are none
    hsize = rec_end - hpos
    if (hsize < 1).any():
        raise ValueError("record length disagrees with its fields")
    bare = (hsize == 1) & (arr[hpos] == 0)
    if bare.all():
        headers = [no_headers] * n
    else:
        blocks = _cut(data, hpos.tolist(), ends)
        if blocks.count(blocks[0]) == n:  # one header set on every record
            hs = _header_list(blocks[0])
            headers = list(map(list, [hs] * n))
        else:
            headers = [no_headers if b == b"\x00" else _header_list(b) for b in blocks]
    keys = _payloads(data, kpos, klen, n)
    values = _payloads(data, vpos, vlen, n)
    # Python ints: a corrupt delta cannot wrap around int64
    timestamps = [base_ts + d for d in ts_delta.tolist()] if ts_delta.any() else [base_ts] * n
    return timestamps, keys, values, headers


_ARANGE = np.arange(1 << 16, dtype=np.int64)
_UNZIGZAG_7BIT = varint.unzigzag(np.arange(256, dtype=np.uint64))


def _varint_col(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """varint.decode_at, with the all-1-byte column (the usual one) in three numpy steps."""
    b = arr[pos]
    if b.max() < 0x80:
        return _UNZIGZAG_7BIT[b], 1
    return varint.decode_at(arr, pos)
