"""A lookup by time (Log.offset_for_time, Kafka's offsetsForTimes and ListOffsets by
timestamp): the first offset, in offset order, whose record timestamp is at or after T.

The first segment holding such a record is found by its largest timestamp
(SegmentSet.first_reaching, a binary search). In it, the time index names the last batch
before which every record is earlier than T (its entries are each a batch whose largest
timestamp grew, so every batch before an entry is earlier than it); the offset index gives
that batch's position, and batch headers are walked from there to the first batch whose
largest timestamp reaches T, which is the only batch decoded. Cancelled records are
offsets like any other here, as in Log.read."""

from __future__ import annotations

from ..index.entry import Entry
from ..log.batch import codec
from ..log.batch.offset_continuity import check_continues
from ..log.segments.segment_set import SegmentSet
from ..records import OffsetAndTimestamp


def offset_for_time(segments: SegmentSet, timestamp: int) -> OffsetAndTimestamp | None:
    """The first record (in offset order) whose timestamp is >= `timestamp`, as its offset
    and timestamp; None if no record is that late. Call with the log's lock held.
    Cost: O(log segments) to find the segment; two index lookups, O(log entries); a header
    walk from the time index's entry, which with timestamps that grow with offsets (the
    log clock's) spans at most an index interval of batches; one batch decoded."""
    seg = segments.first_reaching(timestamp)
    while seg is not None:
        found = _in_segment(seg, timestamp)
        if found is not None:
            return found
        seg = segments.next_after(seg)  # (a segment whose records were all cut off)
    return None


def _in_segment(seg, timestamp: int) -> OffsetAndTimestamp | None:
    before = seg.time_index.offset_before(timestamp)
    found = seg.find_from(seg.base_offset if before is None else before)
    if found is None:
        return None
    expected = found[1].base_offset
    for pos, h in seg.batch_headers(found[0]):
        expected = seg.expected_base(pos, expected)
        check_continues(h.base_offset, expected, False, seg.log_path, pos)
        if h.max_timestamp >= timestamp:
            h, data = seg.read_verified(Entry(h.deliver_after, expected, pos,
                                              h.last_offset_delta, h.size))
            stamps = codec.decode_records(data, h, path=seg.log_path, file_pos=pos).timestamps
            for i, ts in enumerate(stamps):
                if ts >= timestamp:
                    return OffsetAndTimestamp(h.base_offset + i, int(ts))
        expected = h.last_offset + 1
        if expected >= seg.next_offset:
            break  # before the walk parses a header past the indexed end
    return None
