"""A remote copy's cancellation objects: what the store knows of a copied segment's
cancelled records, so that a restore does not bring them back.

- `N.C.cancelled`: the offsets cancelled when the copy was made, sorted and unique, 8 bytes
  each, little-endian (only present if there are any). Named in the manifest with its size
  and CRC-32C, which check it. The copier writes it.
- `N.C.cancellations`: every settled cancellation of the segment as the last sync exported
  it (those made since the copy, cancels and the originals of reschedules, included; a
  superset of `.cancelled`). Written, and rewritten whole (a put replaces an object
  atomically), by the sync whenever the segment's cancellations changed; the manifest
  cannot name it (it is written once, at the commit), so it checks itself:

      0   8s  magic        b"KDRCAN01"
      8   <q  base_offset  the segment's, as its manifest says
      16  <q  next_offset
      24  <q  count        the offsets that follow
      32  count x <u8      the offsets, strictly ascending, inside [base, next)
      ..  <I  crc          CRC-32C of every byte before

An adoption at open turns both (their union) into the segment's cancellation journal;
`kdelay verify --remote` checks both. All go through the functions here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
import numpy as np

from ...errors import CorruptLogError

__all__ = ["CANCELLATIONS_SUFFIX", "CANCELLED_SUFFIX", "cancellations_count",
           "decode_cancellations", "decode_cancelled", "encode_cancellations",
           "encode_cancelled"]

CANCELLED_SUFFIX = ".cancelled"
CANCELLATIONS_SUFFIX = ".cancellations"
_MAGIC = b"KDRCAN01"
_HEAD = struct.Struct("<8sqqq")
_CRC = struct.Struct("<I")


def encode_cancelled(offsets: Sequence[int] | np.ndarray) -> bytes:
    """The `.cancelled` object of `offsets` (sorted and made unique here)."""
    return np.unique(np.asarray(offsets, dtype=np.int64)).astype("<u8").tobytes()


def decode_cancelled(data: bytes, base_offset: int, next_offset: int, where: str
                     ) -> np.ndarray:
    """The offsets (int64, ascending) of the `.cancelled` object `data` of the segment
    [base_offset, next_offset). Raises CorruptLogError naming `where` if it is not a whole
    number of offsets, not strictly ascending, or reaches outside the segment."""
    if len(data) % 8:
        raise CorruptLogError(f"{len(data)} bytes: not a whole number of offsets", where)
    return _checked(np.frombuffer(data, "<u8"), base_offset, next_offset, where)


def _checked(offsets: np.ndarray, base_offset: int, next_offset: int, where: str
             ) -> np.ndarray:
    if len(offsets) and (bool((np.diff(offsets.astype(np.int64)) <= 0).any())
                         or int(offsets[0]) < base_offset or int(offsets[-1]) >= next_offset):
        raise CorruptLogError(f"offsets not sorted and unique, or outside the segment "
                              f"[{base_offset}, {next_offset})", where)
    return offsets.astype(np.int64)


def encode_cancellations(base_offset: int, next_offset: int,
                         offsets: Sequence[int] | np.ndarray) -> bytes:
    """The `.cancellations` object of segment [base_offset, next_offset) with `offsets`
    (sorted and made unique here). O(offsets)."""
    col = np.unique(np.asarray(offsets, dtype=np.int64))
    body = _HEAD.pack(_MAGIC, base_offset, next_offset, len(col)) + col.astype("<u8").tobytes()
    return body + _CRC.pack(crc32c.crc32c(body))


def cancellations_count(size: int) -> int | None:
    """How many offsets a `.cancellations` object of `size` bytes holds (None: no such
    size), as a store listing gives it: no request."""
    n, rest = divmod(size - _HEAD.size - _CRC.size, 8)
    return n if n >= 0 and not rest else None


def decode_cancellations(data: bytes, base_offset: int, next_offset: int, where: str
                         ) -> np.ndarray:
    """The offsets (int64, ascending) of the `.cancellations` object `data` of the segment
    [base_offset, next_offset). Raises CorruptLogError naming `where` if it is cut short,
    fails its CRC, names another segment, or its offsets are not strictly ascending inside
    the segment."""
    count = cancellations_count(len(data))
    if count is None or data[:8] != _MAGIC:
        raise CorruptLogError(f"{len(data)} bytes: not a cancellations object", where)
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(data[:-_CRC.size]) != crc:
        raise CorruptLogError("cancellations object fails its CRC-32C", where)
    _, base, end, n = _HEAD.unpack_from(data)
    if (base, end, n) != (base_offset, next_offset, count):
        raise CorruptLogError(f"cancellations object of segment [{base}, {end}) with {n} "
                              f"offsets, expected [{base_offset}, {next_offset}) with "
                              f"{count}", where)
    return _checked(np.frombuffer(data, "<u8", count, _HEAD.size), base_offset, next_offset,
                    where)
