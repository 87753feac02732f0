"""The DeliverAfterIndex entries appended since the index was last persisted, in numpy columns.

The active segment gets one entry per batch, and with single-record batches that is one entry
per record, so the bytes per entry are the bytes per pending record. Small Python objects per
entry (an int key in a SortedList: ~70 B with its slot, plus the allocator arena it pins once
the producer's freed records around it are gone) cost far more than their size; here an
entry costs 16 bytes of numpy arrays (plus at most 1/16 growth slack) and no Python object:

* in arrival (= offset) order: deliverAfter relative to the first entry's (int32: delays
  within +-24 days of each other), base offset relative to the first entry's (uint32),
  position (uint32). A batch's record count and size follow from the next
  entry (batches of the active segment are contiguous in offsets and bytes); the last one's
  from the running end. Should an entry ever not follow its predecessor, explicit
  last-offset-delta and size columns are kept from then on.
* the order: a sorted array of arrival numbers (uint32) by (deliverAfter, arrival), plus an
  unsorted tail of the latest arrivals, merged in every _TAIL arrivals (a galloping search
  per arrival from where the last one went + one copy of the order: an O(entries) memmove)
  or when a reader needs the whole order. A fetch does not: it takes the tail's due entries
  as a window of their own (`arrivals_window`). No deliverAfter-sorted copy is kept: probes
  bisect the order with deliverAfter as the key (O(log entries) steps).

Columns grow by 1/16 of their size; a value that does not fit its 4-byte column widens
that column to int64 once. The columns, the order's upkeep and the walks over them are
compiled (int_column.pyx, recent_columns.pyx, and recent_windows.pyx for the windows a
fetch takes): an append is one C call, and each window a fetch takes one more.
"""

from __future__ import annotations

import numpy as np

from . import recent_columns, recent_windows
from .entry import E_DELIVER_AFTER, E_LAST_OFFSET_DELTA, ENTRY_FIELDS, Entry
from .int_column import IntColumn
from .recent_columns import RecentColumns

_TAIL = 4096  # unsorted arrivals kept before a merge into the order even if nobody reads
_NEVER = (1 << 63) - 1
_NO_CURSOR = (-1, -1)


class RecentEntries:
    __slots__ = ("cols",)

    def __init__(self) -> None:
        self.cols = RecentColumns(_TAIL)

    @property
    def order(self) -> np.ndarray:
        """Arrival numbers in key order (the merged part; later arrivals are the tail).
        Never changed in place, only replaced: a reader's reference stays a valid
        snapshot."""
        return self.cols.order

    @property
    def da(self) -> IntColumn:
        return self.cols.da

    def __len__(self) -> int:
        return len(self.cols)

    def _da_base(self) -> int:
        """What the stored deliverAfters are relative to (once any entry is held)."""
        base = self.da.base
        if base is None:
            raise ValueError("no deliverAfter stored yet")
        return base

    def __bool__(self) -> bool:
        return len(self.cols) > 0

    def nbytes(self) -> int:
        return self.cols.nbytes() + self.order.nbytes

    # ------------------------------------------------------------------ the order

    def _sorted(self) -> np.ndarray:
        """The whole order, the tail merged into it first (entries are added to `cols`,
        by the append path, which merges every _TAIL arrivals)."""
        if len(self.order) != len(self.cols):
            self.cols.merge()
        return self.order

    def _rank(self, da: int, side_right: bool) -> int:
        return recent_columns.rank(self.da, self._sorted(), da, side_right)

    # ------------------------------------------------------------------ reading

    def columns_of(self, seqs: np.ndarray) -> list[np.ndarray]:
        """The five entry columns (int64, in Entry's order) of the given arrival numbers,
        in that order."""
        seqs = np.asarray(seqs, dtype=np.uint32)
        out = np.empty((ENTRY_FIELDS, len(seqs)), np.int64)
        recent_windows.window(self.cols, seqs, _NEVER, out)
        return list(out)

    def entry_rows(self, seqs: np.ndarray) -> list[Entry]:
        """The entries of the given arrival numbers, in that order."""
        return list(map(Entry._make, zip(*(c.tolist() for c in self.columns_of(seqs)),
                                         strict=True)))

    def window(self, start: int, now: int, limit: int) -> tuple[np.ndarray, bool]:
        """Entries of the merged order from rank `start`: those due at `now`, at most
        `limit` of them, then the first one not due, as five int64 rows; and whether more
        due entries may follow (the limit cut the window short). The tail is not merged
        (see arrivals_window)."""
        seqs = self.order[start:start + limit]
        out = np.empty((ENTRY_FIELDS, len(seqs)), np.int64)
        k = recent_windows.window(self.cols, seqs, now, out)
        more = k == limit and int(out[E_DELIVER_AFTER, k - 1]) <= now and start + limit < len(self.order)
        return out[:, :k], more

    def arrivals_window(self, after: tuple[int, int] | None, now: int) -> np.ndarray:
        """The tail's entries (arrivals not yet merged into the order) that may hold a record
        with key > `after` and are due at `now`, in key order, then the first of them not
        due: five int64 rows."""
        first = len(self.order)
        out = np.empty((ENTRY_FIELDS, len(self.cols) - first), np.int64)
        k = recent_windows.arrivals_window(self.cols, first, *(after or _NO_CURSOR), now, out)
        return out[:, :k]

    def order_start(self, after: tuple[int, int] | None) -> int:
        """Rank in the merged order (the tail left unmerged) of the first entry that may
        hold a record with key > `after`."""
        if after is None:
            return 0
        return recent_columns.start_after(self.cols, self.order, *after)

    def min_deliver_after(self) -> int | None:
        return int(self.da.raw().min()) + self._da_base() if self else None

    def max_entry(self) -> Entry | None:
        return self.entry_rows(self._sorted()[-1:])[0] if self else None

    def first_after(self, now: int) -> int | None:
        """The smallest deliverAfter > `now`, or None."""
        if not self:
            return None
        order = self._sorted()
        j = self._rank(now, True)
        return int(self.da.raw()[order[j]]) + self._da_base() if j < len(order) else None

    def count_not_due(self, now: int) -> tuple[int, int]:
        """(records, batches) with deliverAfter > `now`."""
        if not self:
            return 0, 0
        order = self._sorted()
        j = self._rank(now, True)
        if j == len(order):
            return 0, 0
        lod = self.columns_of(order[j:])[E_LAST_OFFSET_DELTA]
        return int((lod + 1).sum()), len(order) - j

    def columns(self) -> list[np.ndarray]:
        """All entries as five int64 columns in key order (for persisting)."""
        return self.columns_of(self._sorted())
