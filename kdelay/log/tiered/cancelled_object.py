"""The `.cancelled` object of a remote copy: the offsets of the segment cancelled when the
copy was made, sorted and unique, 8 bytes each, little-endian (only present if there are
any). The copier writes it; an adoption at open turns it into the segment's cancellation
journal; `kdelay verify --remote` checks it. All three go through this pair.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import CorruptLogError

__all__ = ["CANCELLED_SUFFIX", "decode_cancelled", "encode_cancelled"]

CANCELLED_SUFFIX = ".cancelled"


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
    offsets = np.frombuffer(data, "<u8")
    if len(offsets) and (bool((np.diff(offsets.astype(np.int64)) <= 0).any())
                         or int(offsets[0]) < base_offset or int(offsets[-1]) >= next_offset):
        raise CorruptLogError(f"offsets not sorted and unique, or outside the segment "
                              f"[{base_offset}, {next_offset})", where)
    return offsets.astype(np.int64)
