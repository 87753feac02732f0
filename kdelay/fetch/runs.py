"""Runs: one segment's DeliverAfterIndex entries after a cursor, in (deliverAfter, offset)
order, from which the page fill (due_merge.py) takes a window at a time.

A ColumnRun walks persisted, memmap'd (immutable) columns: its window is the columns
themselves from its position on, no copy, as far as their chunks are checked (a window
checks the chunks it reaches, index/chunk_checks.py). The active segment's entries
appended since its index was last persisted are two runs: a RecentRun over those merged
into their key order, and an ArrivalsRun over the latest arrivals not merged yet; their
windows are their due entries, gathered into columns.

A window also says up to which entry its batches' bytes are at hand (`ready`): all of them,
but for a RemoteColumnRun, whose bytes are fetched only when the page fill is about to read
a batch past that point (FETCH), with a read-ahead that grows as the run is drained.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..index.chunk_checks import ChunkChecks
from ..index.deliver_after_index import DeliverAfterIndex
from ..index.entry import E_DELIVER_AFTER, Entry
from ..log.batch import codec
from ..log.segments.mapped_file import MappedFile

# an index's five columns in Entry's order (E_* number them): int64 (the last two may be
# int32, as a persisted index holds them)
Columns = list[np.ndarray]
# (columns, start, end, more, ready): entries [start, end) of `columns` may be taken, with
# `more` due entries may follow `end`, and the bytes of the batches before `ready` are at hand
Window = tuple[Columns, int, int, bool, int]
# the most entries of a remote run whose bytes one fetch gets (the read-ahead's bound)
MAX_READ_AHEAD = 4096
READ_AHEAD_GROWTH = 8  # each fetch of a run gets this many times more entries than the last
empty_offsets = np.empty(0, np.int64)  # a segment's cancelled offsets when it has none


class BatchSource(Protocol):
    """What the merge needs of a segment."""

    log_path: str
    base_offset: int
    size: int

    def mapped(self) -> MappedFile: ...

    def read_verified(self, entry: Entry) -> tuple[codec.BatchHeader, bytes]: ...


class RemoteBatchSource(BatchSource, Protocol):
    """What a remote run needs besides: its bytes fetched on demand into a cache."""

    @property
    def cache_generation(self) -> int: ...

    def ensure_entries(self, columns: Columns, start: int, end: int) -> int: ...


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

    def window(self, now: int, limit: int) -> Window:
        """The entries from the run's position on as far as their chunks are checked, all
        of their bytes at hand (see Window)."""
        end = self._checked_to
        if end - self.i < limit and end < self.n:  # per chunk, not per page
            end = self._checked_to = self._chunks.window_end(self.i, limit)
        return self.cols, self.i, end, end < self.n, self.n

    def moved_to(self, head: int) -> None:
        """The page consumed the window's entries before `head`."""
        self.i = head


class RemoteColumnRun(ColumnRun):
    """A ColumnRun over a remote-only segment (kdelay.log.tiered.remote_segment): its
    window is a local run's (its index, fetched whole, was checked whole on loading), and
    ready up to where its bytes were fetched.
    The page fill asks for a batch past that (FETCH) only when it is about to read it, so a
    page fetches nothing for runs it takes nothing from; `fetch` then gets the bytes of
    that entry and of some after it, in one coalesced request: one entry the first time,
    READ_AHEAD_GROWTH times more each time after (up to MAX_READ_AHEAD), so that a page
    fetches little and a drain few requests per segment. A chunk is fetched at most once
    while cached."""

    __slots__ = ("_ready", "_cache_generation", "_ahead")

    seg: RemoteBatchSource

    def __init__(self, seg: RemoteBatchSource, key: tuple, chunks: ChunkChecks, start: int):
        super().__init__(seg, key, chunks, start)
        self._ready = start  # entries [i, _ready) have their bytes in the segment's cache
        self._cache_generation = -1  # ... as long as that cache is this generation
        self._ahead = 1

    def window(self, now: int, limit: int) -> Window:
        cols, start, end, more, _ = super().window(now, limit)
        ready = self._ready if self._cache_generation == self.seg.cache_generation else 0
        return cols, start, end, more, ready

    def fetch(self, head: int, now: int) -> None:
        """The page fill is about to read entry `head`, whose bytes are not at hand: fetch
        them and those of the read-ahead's next due entries."""
        self.i = head
        due_end = int(np.searchsorted(self.cols[E_DELIVER_AFTER], now, side="right"))
        stop = min(head + self._ahead, due_end)  # > head: the fill reads only due entries
        self._cache_generation = self.seg.ensure_entries(self.cols, head, stop)
        self._ready = stop
        self._ahead = min(READ_AHEAD_GROWTH * self._ahead, MAX_READ_AHEAD)


class RecentRun:
    """The active segment's entries not yet persisted, in their merged key order from rank
    `i` (in memory and growing, so never remembered across pages)."""

    __slots__ = ("seg", "i", "_index", "_window_start")

    def __init__(self, seg: BatchSource, index: DeliverAfterIndex, start: int):
        self.seg, self.i, self._index = seg, start, index
        self._window_start = start

    def window(self, now: int, limit: int) -> Window:
        rows, more = self._index.recent_window(self.i, now, limit)
        self._window_start = self.i
        return list(rows), 0, rows.shape[1], more, rows.shape[1]

    def moved_to(self, head: int) -> None:
        self.i = self._window_start + head


class ArrivalsRun:
    """The active segment's latest entries, not yet merged into that order: a window of
    those due, whole (a page rarely takes many, and the next fetch takes them afresh)."""

    __slots__ = ("seg", "_index", "_after")

    def __init__(self, seg: BatchSource, index: DeliverAfterIndex,
                 after: tuple[int, int] | None):
        self.seg, self._index, self._after = seg, index, after

    def window(self, now: int, limit: int) -> Window:
        rows = self._index.arrivals_window(self._after, now)
        return list(rows), 0, rows.shape[1], False, rows.shape[1]

    def moved_to(self, head: int) -> None:
        """Nothing to keep: the run is built afresh for every page."""
