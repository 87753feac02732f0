"""The DeliverAfterIndex (.dlyindex): one entry per batch, sorted by (deliverAfter, offset),
mapping to the batch's position (and size) in the segment's .log.

Entries persisted when the segment rolled (or the log closed) are memmap'd columns searched
with searchsorted; entries appended since live in memory (recent_entries.RecentEntries:
numpy columns, about 16 bytes per batch). The fetch merges both: `start_in_columns` positions
a reader in the persisted columns, and `recent_start`, `recent_window` and `arrivals_window`
give it the recent entries due after a cursor, each in key order.
"""

from __future__ import annotations

import numpy as np

from .base import AbstractIndex
from .entry import E_BASE_OFFSET, E_DELIVER_AFTER, E_LAST_OFFSET_DELTA, E_POSITION, Entry
from .recent_entries import RecentEntries as _RecentEntries


class DeliverAfterIndex(AbstractIndex):
    MAGIC = b"KDLYIDX2"
    DTYPES = [np.dtype("<i8"), np.dtype("<i8"), np.dtype("<i8"), np.dtype("<i4"),
              np.dtype("<i4")]
    NAME = "DeliverAfterIndex"
    # (in Entry's order: the E_* field numbers index them)
    COLUMNS = ("deliver_after", "offset", "position", "last_offset_delta", "size")

    def __init__(self, base_offset: int, columns: list[np.ndarray] | None = None):
        super().__init__(base_offset, columns)
        self._clear_recent()
        self._by_position: tuple[int, np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_entries(cls, base_offset: int, entries: list[Entry]) -> DeliverAfterIndex:
        """An index over entries in any order (as a log scan produces them)."""
        if not entries:
            return cls(base_offset)
        cols = [np.array(c, dtype=d)
                for c, d in zip(zip(*entries, strict=True), cls.DTYPES, strict=True)]
        order = np.lexsort((cols[E_BASE_OFFSET], cols[E_DELIVER_AFTER]))
        return cls(base_offset, [c[order] for c in cols])

    def add(self, deliver_after: int, base_offset: int, position: int, last_offset_delta: int,
            size: int) -> None:
        self.recent_columns.add(deliver_after, base_offset, position, last_offset_delta, size)

    def _clear_recent(self) -> None:
        old = getattr(self, "recent_columns", None)
        if old is not None:  # (the append path keeps a reference while it is not retired)
            old.retired = True
        self._recent = _RecentEntries()
        # its compiled columns, which the append path adds to with no Python call between
        # (segment_tail.pyx): `add` as one C call
        self.recent_columns = self._recent.cols

    def __len__(self) -> int:
        return len(self._columns[0]) + len(self._recent)

    @property
    def has_recent(self) -> bool:
        """True if entries were appended since the index was last persisted."""
        return bool(self._recent)

    def columns(self) -> list[np.ndarray]:
        self._checks.check_all()
        if not self._recent:
            return [np.asarray(c) for c in self._columns]
        fresh = [c.astype(d) for c, d in zip(self._recent.columns(), self.DTYPES, strict=True)]
        merged = [np.concatenate([a, b]) for a, b in zip(self._columns, fresh, strict=True)]
        order = np.lexsort((merged[E_BASE_OFFSET], merged[E_DELIVER_AFTER]))
        return [c[order] for c in merged]

    # ------------------------------------------------------------------ summaries

    def min_deliver_after(self) -> int | None:
        cands = []
        da = self._columns[E_DELIVER_AFTER]
        if len(da):
            self._checks.check(0, 1)
            cands.append(int(da[0]))
        recent = self._recent.min_deliver_after() if self._recent else None
        if recent is not None:
            cands.append(recent)
        return min(cands) if cands else None

    def max_key(self) -> tuple[int, int] | None:
        """The largest (deliverAfter, offset) of any record in the segment."""
        cands = []
        da = self._columns[E_DELIVER_AFTER]
        n = len(da)
        if n:
            self._checks.check(n - 1, n)
            cands.append((int(da[-1]), int(self._columns[E_BASE_OFFSET][-1]) +
                          int(self._columns[E_LAST_OFFSET_DELTA][-1])))
        e = self._recent.max_entry() if self._recent else None
        if e is not None:
            cands.append((e.deliver_after, e.last_offset))
        return max(cands) if cands else None

    def first_after(self, now: int) -> int | None:
        """The smallest deliverAfter > `now` (None if no entry is that late)."""
        cands = []
        da = self._columns[E_DELIVER_AFTER]
        j = self._checks.search_right(da, now)
        if j < len(da):
            cands.append(int(da[j]))
        later = self._recent.first_after(now)
        if later is not None:
            cands.append(later)
        return min(cands) if cands else None

    def count_pending(self, now: int) -> tuple[int, int]:
        """(records not yet due at `now`, batches not yet due)."""
        da, lod = self._columns[E_DELIVER_AFTER], self._columns[E_LAST_OFFSET_DELTA]
        j = self._checks.search_right(da, now)
        self._checks.check(j, len(da))
        records = int((lod[j:].astype(np.int64) + 1).sum())
        batches = len(da) - j
        r, b = self._recent.count_not_due(now)
        records += r
        batches += b
        return records, batches

    def memory_bytes(self) -> int:
        # numpy columns: ~16 B per recent batch (recent_entries.py), no Python object each
        return self._recent.nbytes()

    # ------------------------------------------------------------------ reading

    def start_in_columns(self, after: tuple[int, int] | None) -> int:
        """Index of the first persisted entry that may hold a record with key > `after`.
        Checks only the chunks either side of the answer (ChunkChecks.certify)."""
        if after is None:
            return 0
        da_c, off_c = after
        da, off = self._columns[E_DELIVER_AFTER], self._columns[E_BASE_OFFSET]
        lod = self._columns[E_LAST_OFFSET_DELTA]
        lo = int(np.searchsorted(da, da_c, side="left"))
        hi = int(np.searchsorted(da, da_c, side="right"))
        j = lo + int(np.searchsorted(off[lo:hi], off_c, side="right"))  # first key > after
        below = (int(da[j - 1]), int(off[j - 1])) if j else None
        if not self._checks.complete:
            above = (int(da[j]), int(off[j])) if j < len(da) else None
            self._checks.certify(j, below, above, (da_c, off_c))
        if below is not None and below[0] == da_c and below[1] + int(lod[j - 1]) > off_c:
            j -= 1  # the batch holding the cursor still has records after it
        return j

    def base_offset_at(self, position: int) -> int | None:
        """The base offset of the batch indexed at `position` (None if no batch is).
        O(log n) after a one-off O(n log n) sort by position, redone when entries change."""
        if self._by_position is None or self._by_position[0] != len(self):
            cols = self.columns()
            off, pos = cols[E_BASE_OFFSET], cols[E_POSITION]
            order = np.argsort(pos, kind="stable")
            self._by_position = (len(self), pos[order], off[order])
        _, positions, offsets = self._by_position
        j = int(np.searchsorted(positions, position))
        if j < len(positions) and int(positions[j]) == position:
            return int(offsets[j])
        return None

    def recent_start(self, after: tuple[int, int] | None) -> int:
        """Where a fetch from `after` starts in the in-memory entries' merged order
        (RecentEntries.order_start)."""
        return self._recent.order_start(after)

    def recent_window(self, start: int, now: int, limit: int) -> tuple[np.ndarray, bool]:
        """In-memory entries of the merged order from rank `start` (RecentEntries.window)."""
        return self._recent.window(start, now, limit)

    def arrivals_window(self, after: tuple[int, int] | None, now: int) -> np.ndarray:
        """In-memory entries not yet merged into the order (RecentEntries.arrivals_window)."""
        return self._recent.arrivals_window(after, now)
