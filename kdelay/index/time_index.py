"""The time index (.timeindex): (max timestamp so far, offset) entries, one every
`index_interval_bytes` when the timestamp has grown, as in Kafka. It answers "from which
offset on can records have a timestamp >= t" without reading the log."""

from __future__ import annotations

import numpy as np

from .base import AppendOnlyIndex


class TimeIndex(AppendOnlyIndex):
    MAGIC = b"KTIMIDX2"
    DTYPES = [np.dtype("<i8"), np.dtype("<i8")]  # timestamp, offset
    NAME = "time index"
    COLUMNS = ("timestamp", "offset")

    def offset_before(self, timestamp: int) -> int | None:
        """The offset of the last entry whose timestamp is < `timestamp` (scan from there)."""
        entry = self.floor(timestamp - 1)
        return None if entry is None else entry[1]
