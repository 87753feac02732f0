"""Zigzag varints (Kafka v2 / protobuf style), encoded and decoded a whole column at a time.

A record batch holds a handful of varints per record. Coding them one record at a time in
Python costs microseconds per record; here every varint of a batch is coded by a few numpy
operations on arrays, so the cost is per batch.
"""

from __future__ import annotations

import numpy as np

_THRESHOLDS = [np.uint64(1) << np.uint64(7 * k) for k in range(1, 10)]
_SEVEN = [np.uint64(7 * j) for j in range(10)]
_LOW7 = np.uint64(0x7F)


def zigzag(values: np.ndarray) -> np.ndarray:
    """Signed int64 -> unsigned zigzag form (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def unzigzag(values: np.ndarray) -> np.ndarray:
    u = values.astype(np.uint64, copy=False)
    return ((u >> np.uint64(1)) ^ (np.uint64(0) - (u & np.uint64(1)))).view(np.int64)


def sizes(unsigned: np.ndarray) -> np.ndarray:
    """Bytes each (already zigzagged) value takes as a varint."""
    out = np.ones(unsigned.shape, dtype=np.int64)
    for t in _THRESHOLDS:
        over = unsigned >= t
        if not over.any():
            break
        out += over
    return out


def encode(unsigned: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """The varint bytes of every value, concatenated in order (uint8 array).

    `nbytes` must be `sizes(unsigned)`; it is passed in because callers need it anyway.
    """
    flat = unsigned.ravel()
    n = flat.shape[0]
    width = int(nbytes.max()) if n else 1
    mat = np.empty((n, width), dtype=np.uint8)
    sz = nbytes.ravel()
    for j in range(width):
        group = (flat >> _SEVEN[j]) & _LOW7
        more = sz > j + 1
        mat[:, j] = group | (more.astype(np.uint64) << np.uint64(7))
    if width == 1:
        return mat[:, 0]
    return mat[np.arange(width) < sz[:, None]]


def decode_at(buf: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zigzag varint at each position of `buf` (uint8, padded with >= 10 zero
    bytes past the data). Returns (signed values, sizes in bytes). A varint longer than
    10 bytes yields size 11, which callers treat as corruption."""
    first = buf[positions]
    if not (first & 0x80).any():
        v = first.astype(np.uint64)
        return unzigzag(v), np.ones(positions.shape, dtype=np.int64)
    g = buf[positions[:, None] + np.arange(10)]
    ends = (g & 0x80) == 0
    has_end = ends.any(axis=1)
    nbytes = np.where(has_end, ends.argmax(axis=1) + 1, 11)
    keep = np.arange(10) < nbytes[:, None]
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
    return (u >> 1) ^ -(u & 1), pos
