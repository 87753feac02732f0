"""The offset-order read: records in plain offset order from an offset, due or not.

The sparse offset index finds the batch holding the start offset (in a compacted segment,
the first batch at or after it: offsets removed by compaction are skipped); from there batch
headers are walked forward, segment after segment, and each batch is read and verified
once. O(batches read) plus one index search.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..index.entry import Entry
from ..log.batch.codec import BatchHeader
from ..log.segments.layout import DLYINDEX_SUFFIX, INDEX_SUFFIX
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..records import FetchedRecord
from .due_merge import batch_records
from .planner import prefetch_indexes

# what the walk reads of a segment's indexes: the offset index finds its start, the dly
# index the positions of its batches
OFFSET_ORDER_INDEXES = (INDEX_SUFFIX, DLYINDEX_SUFFIX)


def read_from(segments: SegmentSet, offset: int, max_records: int) -> list[FetchedRecord]:
    """Up to `max_records` records from `offset` (at or above the log start) on, continuing
    at the next surviving offset across any gap: between segments (recovery cut a damaged
    sealed segment short, compaction removed records) or inside one. A segment is read only
    up to its indexed end (`next_offset`): bytes past it are damage the open cut off."""
    out: list[FetchedRecord] = []
    for h, data, seg, pos in _walk(segments, offset):
        skip = max(0, offset - h.base_offset)
        out.extend(batch_records(h, data, skip, max_records - len(out), seg, pos))
        if len(out) >= max_records:
            break
    return out


def batches_from(segments: SegmentSet, offset: int, max_bytes: int) -> list[bytes]:
    """The stored batches (checked, as read_from reads them) from the one holding `offset`
    on, while their sizes keep within `max_bytes` (at least one): a plain topic's fetch
    serves them with rewritten headers, no record decoded. O(batches read)."""
    out: list[bytes] = []
    taken = 0
    for _, data, _, _ in _walk(segments, offset):
        if out and taken + len(data) > max_bytes:
            break
        out.append(data)
        taken += len(data)
    return out


def _walk(segments: SegmentSet, offset: int
          ) -> Iterator[tuple[BatchHeader, bytes, LogSegment, int]]:
    """(header, bytes, segment, position) of each batch from the one holding `offset` on."""
    seg = segments.segment_for(offset)
    while seg is not None:
        if offset < seg.next_offset:
            found = seg.find_from(max(offset, seg.base_offset))
            start, expected = (found[0], found[1].base_offset) if found else (seg.size, 0)
            for pos, h in seg.batch_headers(start):
                # offsets must run on without a gap (a header's own base offset is no check
                # of itself), except where compaction removed some (known from the index)
                expected = seg.expected_base(pos, expected)
                h, data = seg.read_verified(Entry(h.deliver_after, expected, pos,
                                                  h.last_offset_delta, h.size))
                expected = h.last_offset + 1
                yield h, data, seg, pos
                if expected >= seg.next_offset:
                    break  # before the walk parses a header past the indexed end
        seg = segments.next_after(seg)
        if seg is not None:
            prefetch_indexes(filter(None, [segments.next_after(seg)]), OFFSET_ORDER_INDEXES)
            offset = max(offset, seg.base_offset)

