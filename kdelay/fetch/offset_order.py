"""The offset-order read: records in plain offset order from an offset, due or not.

The sparse offset index finds the batch holding the start offset; from there batch
headers are walked forward, segment after segment, and each batch is read and verified
once. O(batches read) plus one index search.
"""

from __future__ import annotations

from ..log.segment_set import SegmentSet
from ..records import FetchedRecord
from .page import batch_records


def read_from(segments: SegmentSet, offset: int, max_records: int) -> list[FetchedRecord]:
    """Up to `max_records` records from `offset` (at or above the log start) on."""
    out: list[FetchedRecord] = []
    seg = segments.segment_for(offset)
    while seg is not None and len(out) < max_records:
        found = seg.find_batch(offset)
        start = found[0] if found else seg.size
        expected = found[1].base_offset if found else seg.next_offset
        for pos, h in seg.batch_headers(start):
            # offsets must run on without a gap: a header's own base offset is no check
            # of itself
            h, data = seg.read_verified(pos, h.size, expected)
            expected = h.last_offset + 1
            skip = max(0, offset - h.base_offset)
            out.extend(batch_records(h, data, skip, max_records - len(out), seg, pos))
            if len(out) >= max_records:
                break
        offset = seg.next_offset
        seg = segments.next_after(seg)
    return out
