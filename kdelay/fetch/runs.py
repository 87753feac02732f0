"""Runs: one segment's DeliverAfterIndex entries after a cursor, in (deliverAfter, offset)
order, from which the page fill (due_merge.py) takes a window at a time.

A ColumnRun walks persisted, memmap'd (immutable) columns: its window is the columns
themselves from its position on, no copy, as far as their chunks are checked (a window
checks the chunks it reaches, index/chunk_checks.py). The active segment's entries
appended since its index was last persisted are two runs: a RecentRun over those merged into their key order,
and an ArrivalsRun over the latest arrivals not merged yet; their windows are their due
entries, gathered into columns.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..index.chunk_checks import ChunkChecks
from ..index.deliver_after_index import DeliverAfterIndex, Entry
from ..log.batch import codec
from ..log.segments.mapped_file import MappedFile

# (deliver_after, base_offset, position, last_offset_delta, size): int64 (the last two may
# be int32, as a persisted index holds them)
Columns = list[np.ndarray]


class BatchSource(Protocol):
    """What the merge needs of a segment."""

    log_path: str
    base_offset: int
    size: int

    def mapped(self) -> MappedFile: ...

    def read_verified(self, entry: Entry) -> tuple[codec.BatchHeader, bytes]: ...


class ColumnRun:
    """Entries of immutable, persisted index columns from index `i` on."""

    __slots__ = ("seg", "key", "cols", "i", "n", "_chunks", "_checked_to")

    def __init__(self, seg: BatchSource, key: tuple, chunks: ChunkChecks, start: int):
        self.seg, self.key, self.cols, self._chunks = seg, key, chunks.columns, chunks
        self.i, self.n = start, chunks.n
        self._checked_to = max(start, chunks.checked_prefix)  # [i, _checked_to) checked

    @property
    def exhausted(self) -> bool:
        return self.i >= self.n

    def window(self, now: int, limit: int) -> tuple[Columns, int, int, bool]:
        """(columns, start, end, more): entries [start, end) of `columns` may be taken,
        and with `more` due entries may follow `end`."""
        end = self._checked_to
        if end - self.i < limit and end < self.n:  # per chunk, not per page
            end = self._checked_to = self._chunks.window_end(self.i, limit)
        return self.cols, self.i, end, end < self.n

    def moved_to(self, head: int) -> None:
        """The page consumed the window's entries before `head`."""
        self.i = head


class RecentRun:
    """The active segment's entries not yet persisted, in their merged key order from rank
    `i` (in memory and growing, so never remembered across pages)."""

    __slots__ = ("seg", "i", "_index", "_window_start")

    def __init__(self, seg: BatchSource, index: DeliverAfterIndex, start: int):
        self.seg, self.i, self._index = seg, start, index
        self._window_start = start

    def window(self, now: int, limit: int) -> tuple[Columns, int, int, bool]:
        rows, more = self._index.recent_window(self.i, now, limit)
        self._window_start = self.i
        return list(rows), 0, rows.shape[1], more

    def moved_to(self, head: int) -> None:
        self.i = self._window_start + head


class ArrivalsRun:
    """The active segment's latest entries, not yet merged into that order: a window of
    those due, whole (a page rarely takes many, and the next fetch takes them afresh)."""

    __slots__ = ("seg", "_index", "_after")

    def __init__(self, seg: BatchSource, index: DeliverAfterIndex,
                 after: tuple[int, int] | None):
        self.seg, self._index, self._after = seg, index, after

    def window(self, now: int, limit: int) -> tuple[Columns, int, int, bool]:
        rows = self._index.arrivals_window(self._after, now)
        return list(rows), 0, rows.shape[1], False

    def moved_to(self, head: int) -> None:
        """Nothing to keep: the run is built afresh for every page."""
