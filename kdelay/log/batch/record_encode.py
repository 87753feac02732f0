"""The records section of a v2 batch, any shape: what Python hands the compiled coder.

A record is ``[length][attributes][tsDelta][offsetDelta][keyLength][key][valueLength][value]
[headerCount][headers]`` with zigzag varints (Kafka v2). Every shape (per-record timestamps,
increasing or not; headers on some or all records; null keys and values; mixed sizes) takes
one path: Python gathers the batch into a few flat columns with C-level calls (one join of
the payloads, one pass of ``len``), and record_loops.encode_records writes every record. Header
blocks are encoded once per distinct header set (the retry header on every record of a
batch is encoded once). Decoding is record_decode.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import is_, length_hint
from typing import NamedTuple, cast

import numpy as np

from ...records import PackedBinary
from . import record_loops, varint

HEADER_SIZE = 69


class RecordColumns(NamedTuple):
    """A batch's records, decoded column-wise."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]


_ZERO = b"\x00"

# Header blocks (count + headers), by header set.
_HB: dict[tuple, bytes] = {}
_HB_LIMIT = 4096


def header_block(headers) -> bytes:
    """headerCount and the headers of one record (cached by content)."""
    if not headers:
        return _ZERO
    try:
        key = tuple(headers)
        block = _HB.get(key)
    except TypeError:  # an unhashable header (a list pair): encode without the cache
        return _encode_header_block(headers)
    if block is None:
        block = _encode_header_block(headers)
        if len(_HB) > _HB_LIMIT:
            _HB.clear()
        _HB[key] = block
    return block


def _encode_header_block(headers) -> bytes:
    parts = [varint.encode_one(len(headers))]
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        parts.append(varint.encode_one(len(kb)))
        parts.append(kb)
        if hval is None:
            parts.append(varint.encode_one(-1))
        else:
            parts.append(varint.encode_one(len(hval)))
            parts.append(bytes(hval))
    return b"".join(parts)


def _header_columns(headers: Sequence | None, n: int
                    ) -> tuple[np.ndarray | None, bytes | None, int]:
    """(block lengths, blocks back to back, bytes of all n blocks) as
    record_loops.encode_records takes them (None, None without headers)."""
    if headers is None:
        return None, None, n
    h0 = headers[0]
    if headers.count(h0) == n:  # one header set on every record (e.g. the retry header)
        block = header_block(h0)
        return np.array([len(block)], np.int64), block, n * len(block)
    blocks = list(map(header_block, headers))
    joined = b"".join(blocks)
    return np.fromiter(map(len, blocks), np.int64, n), joined, len(joined)


def encode_batch_body(keys: Sequence | PackedBinary, values: Sequence | PackedBinary,
                      deltas: np.ndarray | None,
                      headers: Sequence | None) -> tuple[memoryview, int]:
    """A batch's bytes with its 69-byte header left zero, to be filled in by the codec, and
    the largest timestamp delta (0 without deltas).
    Keys and values are bytes or None each, or both PackedBinary (already checked);
    `deltas` the int64 timestamp deltas (None: all 0);
    `headers` None or one header sequence per record. O(records), all of it in C-level
    calls and the compiled kernel."""
    joined: bytes | np.ndarray
    if isinstance(values, PackedBinary):  # checked by columns._packed
        assert isinstance(keys, PackedBinary)  # both are, or neither
        n = len(values.lengths)
        lengths = np.concatenate((keys.lengths, values.lengths))
        # _packed made each one's data a uint8 array
        joined = np.concatenate((cast(np.ndarray, keys.data), cast(np.ndarray, values.data)))
    else:
        n = len(values)
        payloads = (*keys, *values)
        try:
            joined = b"".join(payloads)
            lengths = np.fromiter(map(len, payloads), np.int64, 2 * n)
        except TypeError:  # a null key or value (length -1): still C-level passes only
            lengths = np.fromiter(map(length_hint, payloads), np.int64, 2 * n)  # None: 0
            lengths[np.fromiter(map(is_, payloads, repeat(None)), bool, 2 * n)] = -1
            joined = b"".join(filter(None, payloads))
    header_lengths, blocks, header_bytes = _header_columns(headers, n)
    # (bytes and a bytearray rather than numpy arrays: their buffers are cheaper to hand over)
    out = bytearray(record_loops.encode_bound(HEADER_SIZE, n, len(joined), header_bytes))
    size, max_delta = record_loops.encode_records(HEADER_SIZE, lengths, joined, deltas,
                                                  header_lengths, blocks, out)
    if size < 0:  # a bug (callers pass checked columns), never bad input
        raise AssertionError("encode_records refused its arguments")
    return memoryview(out)[:size], max_delta
