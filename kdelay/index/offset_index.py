"""The sparse offset index (.index): an entry every `index_interval_bytes` of log, mapping a
batch's base offset to its byte position, as in Kafka. Finding an offset is a searchsorted
to the nearest entry at or below it, then a short forward scan of batch headers."""

from __future__ import annotations

import numpy as np

from .base import AppendOnlyIndex


class OffsetIndex(AppendOnlyIndex):
    MAGIC = b"KOFFIDX2"
    DTYPES = [np.dtype("<i8"), np.dtype("<i8")]  # offset, position
    NAME = "offset index"
    COLUMNS = ("offset", "position")

    def lookup(self, offset: int) -> int:
        """Byte position from which to scan for `offset` (0 if before every entry)."""
        entry = self.floor(offset)
        return 0 if entry is None else entry[1]
