"""Zigzag varints (Kafka v2 / protobuf style), encoded and decoded a whole column at a time.

A record batch holds a handful of varints per record. Coding them one record at a time in
Python costs microseconds per record; here every varint of a batch is coded by a few numpy
operations on arrays, so the cost is per batch. Decoding special-cases the 1- and 2-byte
forms (offset deltas below 8192, lengths below 8192) because that is almost every varint in
a real batch, and the general 10-byte gather costs several times more.
"""

from __future__ import annotations

import numpy as np

# Values below _THRESHOLDS[k] fit in k + 1 bytes; searchsorted turns that into a size in one call.
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SEVEN = [np.uint64(7 * j) for j in range(10)]
_U1 = np.uint64(1)
_ARANGE10 = np.arange(10)


def zigzag(values: np.ndarray) -> np.ndarray:
    """Signed int64 -> unsigned zigzag form (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def unzigzag(values: np.ndarray) -> np.ndarray:
    u = values.astype(np.uint64, copy=False)
    return ((u >> _U1) ^ (np.uint64(0) - (u & _U1))).view(np.int64)


def _unzigzag_small(v: np.ndarray) -> np.ndarray:
    """unzigzag for int64 values known to be non-negative (below 2**63): fewer, cheaper ops."""
    return (v >> 1) ^ -(v & 1)


def sizes(unsigned: np.ndarray) -> np.ndarray:
    """Bytes each (already zigzagged) value takes as a varint."""
    return np.searchsorted(_THRESHOLDS, unsigned, side="right") + 1


def decode_at(buf: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zigzag varint at each position of `buf` (uint8, padded with >= 10 zero
    bytes past the data). Returns (signed values, sizes in bytes). Raises ValueError for a
    varint longer than 10 bytes, IndexError when a read runs past `buf`."""
    first = buf[positions]
    cont = first >= 0x80
    if not cont.any():
        return _unzigzag_small(first.astype(np.int64)), np.ones(positions.shape, dtype=np.int64)
    second = buf[positions + 1]
    if not (cont & (second >= 0x80)).any():
        # every varint is 1 or 2 bytes: no (n, 10) gather needed
        lo = (first & 0x7F).astype(np.int64)
        lo[cont] |= second[cont].astype(np.int64) << 7
        return _unzigzag_small(lo), cont.astype(np.int64) + 1
    g = buf[positions[:, None] + _ARANGE10]
    ends = (g & 0x80) == 0
    if not ends.any(axis=1).all():
        raise ValueError("varint longer than 10 bytes")
    nbytes = ends.argmax(axis=1) + 1
    keep = nbytes[:, None] > _ARANGE10
    groups = (g & 0x7F).astype(np.uint64) * keep
    u = np.zeros(positions.shape, dtype=np.uint64)
    for j in range(10):
        u |= groups[:, j] << _SEVEN[j]
    return unzigzag(u), nbytes


def encode_one(value: int) -> bytes:
    """A single zigzag varint (for the rare per-record paths, e.g. headers)."""
    u = (value << 1) ^ (value >> 63)
    u &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def size_one(value: int) -> int:
    """Bytes the zigzag varint of one signed int64 takes."""
    u = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n


def decode_one(buf, pos: int) -> tuple[int, int]:
    """(signed value, next position) of the varint at `pos`; IndexError past the end,
    ValueError for a varint over 10 bytes."""
    u = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")
    u &= 0xFFFFFFFFFFFFFFFF  # as Kafka reads a varlong: bits past 64 are dropped
    return (u >> 1) ^ -(u & 1), pos
