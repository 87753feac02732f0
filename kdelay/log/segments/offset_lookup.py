"""OffsetLookup: finding a batch by offset in a segment, local or remote.

What both kinds of segment share (segment.LogSegment, tiered.remote_segment.RemoteSegment):
the sparse offset index gives the nearest indexed batch at or before an offset, and the
segment's own `batch_headers` walk goes on from there. The index entry (or the segment's
base) says which offset each batch must start at, so a damaged base offset in a header is
reported, never believed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import CorruptLogError
from ...index.deliver_after_index import DeliverAfterIndex
from ...index.offset_index import OffsetIndex
from ..batch import codec
from ..batch.offset_continuity import check_continues, continues


class OffsetLookup:
    """Mixed into a segment class that provides the attributes annotated here."""

    base_offset: int
    next_offset: int
    compacted: bool
    log_path: str

    if TYPE_CHECKING:  # read-only here: a remote segment's are properties
        @property
        def offset_index(self) -> OffsetIndex: ...

        @property
        def dly_index(self) -> DeliverAfterIndex: ...

    def batch_headers(self, start: int = 0) -> Iterator[tuple[int, codec.BatchHeader]]:
        raise NotImplementedError

    def find_batch(self, offset: int) -> tuple[int, codec.BatchHeader] | None:
        """The batch holding `offset`, found via the sparse offset index (None if it is not
        in this segment, or was removed by compaction)."""
        found = self.find_from(offset)
        if found is None or found[1].base_offset > offset:
            return None
        return found

    def expected_base(self, position: int, expected: int) -> int:
        """The base offset the batch at `position` must have, `expected` being the offset
        after the batch before it. Outside compaction that is `expected`. A compacted
        segment may skip forward past removed offsets; the base offset is not covered by
        the batch CRC, so the skip is taken from this segment's index, never from the
        header (a damaged header is reported, not believed)."""
        if not self.compacted:
            return expected
        indexed = self.dly_index.base_offset_at(position)
        if indexed is None or not (continues(indexed, expected, self.compacted)
                                   and indexed < self.next_offset):
            raise CorruptLogError(f"batch at {position} is not where the index of this "
                                  f"compacted segment has one after offset {expected}",
                                  self.log_path, position)
        return indexed

    def find_from(self, offset: int) -> tuple[int, codec.BatchHeader] | None:
        """The first batch holding `offset` or, in a compacted segment, the first after it
        (offsets removed by compaction are skipped). None if there is none."""
        if not (self.base_offset <= offset < self.next_offset):
            return None
        entry = self.offset_index.floor(offset)
        expected, start = (self.base_offset, 0) if entry is None else entry
        for pos, h in self.batch_headers(start):
            # the index entry (or the segment base) says which offset each batch must start
            # at, exactly; a damaged base offset would otherwise be believed
            expected = self.expected_base(pos, expected)
            check_continues(h.base_offset, expected, False, self.log_path, pos)
            if h.last_offset >= offset:
                return pos, h
            expected = h.last_offset + 1
        return None
