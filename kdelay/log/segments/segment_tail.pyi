"""Type stub of segment_tail.pyx (compiled): a segment's end, where appends are written."""

from typing import Any

import numpy as np

from ...index.deliver_after_index import DeliverAfterIndex
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex

class SegmentTail:
    fd: int
    size: int
    next_offset: int
    max_timestamp: int
    max_timestamp_offset: int
    _first_timestamp: int | None
    _bytes_since_index_entry: int
    offset_index: OffsetIndex
    time_index: TimeIndex
    dly_index: DeliverAfterIndex
    def append(self, batch: bytes, header_base: int, last_offset_delta: int,
               deliver_after: int, max_timestamp: int, index_interval_bytes: int,
               sync: bool = False) -> int: ...
    def append_many(self, data: bytes, entries: np.ndarray[Any, Any],
                    index_interval_bytes: int, sync: bool = False,
                    body: bytes | memoryview | None = None) -> int: ...
    def _index_batch(self, entry: tuple[int, int, int, int, int], max_timestamp: int,
                     interval: int) -> None: ...
    def rolls_before(self, incoming: int, max_timestamp: int, segment_bytes: int,
                     segment_ms: int) -> bool: ...
