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
  unsorted tail of the latest arrivals. A reader sorts the tail and merges it in once
  (binary searches + one insert: an O(entries) memmove; without readers a merge happens
  every _TAIL arrivals). No deliverAfter-sorted copy is kept: probes bisect the order with
  deliverAfter as the key (O(log entries) steps).

Columns grow by 1/16 of their size; a value that does not fit its 4-byte column widens
that column to int64 once.

Reading in key order is a lazy walk of the merged order in growing chunks, so a fetch from
a cursor costs O(log entries + page) after the merge.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

import numpy as np

Entry = tuple[int, int, int, int, int]  # (deliver_after, base_offset, position, lod, size)

_TAIL = 4096  # unsorted arrivals kept before a merge into the order even if nobody reads
_FIRST_CHUNK = 16
_MAX_CHUNK = 4096
_U32_MAX = (1 << 32) - 1


_RANGE = {np.dtype(np.uint32): (0, _U32_MAX), np.dtype(np.int32): (-(1 << 31), (1 << 31) - 1)}


class _Column:
    """A growable 1-D numpy column of ints stored as `value - base` (base: the first value
    for a relative column, else 0) in a 4-byte dtype, widened to int64 once a value does not
    fit. Capacity grows by a sixteenth (at most 1/16 slack)."""

    __slots__ = ("a", "n", "base")

    def __init__(self, dtype, relative: bool = False) -> None:
        self.a = np.empty(64, dtype=dtype)
        self.n = 0
        self.base = None if relative else 0

    def append(self, v: int) -> None:
        if self.base is None:
            self.base = v
        x = v - self.base
        a = self.a
        if self.n == len(a):  # (not np.resize: its result is a view of a buffer twice as big)
            grown = np.empty(len(a) + max(64, len(a) >> 4), dtype=a.dtype)
            grown[:self.n] = a
            a = self.a = grown
        bounds = _RANGE.get(a.dtype)
        if bounds is not None and not bounds[0] <= x <= bounds[1]:
            a = self.a = a.astype(np.int64)
        a[self.n] = x
        self.n += 1

    def raw(self) -> np.ndarray:
        """The stored values (value - base)."""
        return self.a[:self.n]

    def get(self, idx) -> np.ndarray:
        """The values at `idx` (int64)."""
        return self.a[idx].astype(np.int64) + (self.base or 0)

    def nbytes(self) -> int:
        return self.a.nbytes


class RecentEntries:
    __slots__ = ("da", "rel", "pos", "lod", "size", "order", "base0", "next_base", "end_pos")

    def __init__(self) -> None:
        self.da = _Column(np.int32, relative=True)  # deliverAfter - the first one's
        self.rel = _Column(np.uint32)
        self.pos = _Column(np.uint32)
        self.lod: _Column | None = None  # explicit columns once an entry skips ahead
        self.size: _Column | None = None
        # arrival numbers in key order (the merged part; later arrivals are the tail). Never
        # changed in place, only replaced: a reader's reference stays a valid snapshot.
        self.order = np.empty(0, dtype=np.uint32)
        self.base0 = 0
        self.next_base = 0
        self.end_pos = 0

    def __len__(self) -> int:
        return self.da.n

    def __bool__(self) -> bool:
        return self.da.n > 0

    def nbytes(self) -> int:
        total = self.da.nbytes() + self.rel.nbytes() + self.pos.nbytes() + self.order.nbytes
        if self.lod is not None:
            total += self.lod.nbytes() + self.size.nbytes()
        return total

    # ------------------------------------------------------------------ writing

    def add(self, da: int, base: int, pos: int, lod: int, size: int) -> None:
        n = self.da.n
        if n == 0:
            self.base0 = base
        elif base < self.next_base:
            raise ValueError(f"entries must arrive in offset order ({base} after "
                             f"{self.next_base - 1})")
        elif self.lod is None and (base != self.next_base or pos != self.end_pos):
            self._explicit()
        self.da.append(da)
        self.rel.append(base - self.base0)
        self.pos.append(pos)
        if self.lod is not None:
            self.lod.append(lod)
            self.size.append(size)
        self.next_base = base + lod + 1
        self.end_pos = pos + size
        if n + 1 - len(self.order) >= _TAIL:
            self._merge()

    def _explicit(self) -> None:
        """Start explicit lod/size columns, filled for the entries so far."""
        cols = self.columns_of(np.arange(self.da.n))
        self.lod = _Column(np.uint32)
        self.size = _Column(np.uint32)
        for v in cols[3].tolist():
            self.lod.append(v)
        for v in cols[4].tolist():
            self.size.append(v)

    def _merge(self) -> None:
        """Fold the unsorted tail of arrivals into the sorted order."""
        order = self.order
        m = len(order)
        n = self.da.n
        if m == n:
            return
        da = self.da.raw()  # stored relative to one base: order-preserving
        tail = np.arange(m, n, dtype=np.uint32)
        tail = tail[np.argsort(da[m:], kind="stable")]
        if not m:
            self.order = tail
            return
        # ties on deliverAfter: every tail arrival is later, so it goes after (side=right)
        if n - m <= 32:  # a few probes: O(log m) each, no O(m) gather
            key = da.__getitem__
            at = [bisect_right(order, d, key=key) for d in da[tail].tolist()]
        else:
            at = np.searchsorted(da[order], da[tail], side="right")
        self.order = np.insert(order, at, tail)

    def _sorted(self) -> np.ndarray:
        if len(self.order) != self.da.n:
            self._merge()
        return self.order

    def _rank(self, da: int, side_right: bool) -> int:
        order = self._sorted()
        key = self.da.raw().__getitem__
        x = da - (self.da.base or 0)
        return (bisect_right if side_right else bisect_left)(order, x, key=key)

    # ------------------------------------------------------------------ reading

    def columns_of(self, seqs: np.ndarray) -> list[np.ndarray]:
        """The five entry columns (int64) of the given arrival numbers, in that order."""
        seqs = np.asarray(seqs, dtype=np.int64)
        rel = self.rel.raw()
        pos = self.pos.raw()
        r = rel[seqs].astype(np.int64)
        p = pos[seqs].astype(np.int64)
        if self.lod is not None:
            lod = self.lod.get(seqs)
            size = self.size.get(seqs)
        else:
            nxt = seqs + 1
            last = nxt >= len(rel)  # (callers hold the log's lock; this keeps indexes in range)
            nxt[last] = 0
            nr = np.where(last, self.next_base - self.base0, rel[nxt].astype(np.int64))
            npos = np.where(last, self.end_pos, pos[nxt].astype(np.int64))
            lod = nr - r - 1
            size = npos - p
        return [self.da.get(seqs), r + self.base0, p, lod, size]

    def entry_rows(self, seqs: np.ndarray) -> list[Entry]:
        """The entries of the given arrival numbers, in that order."""
        return list(zip(*(c.tolist() for c in self.columns_of(seqs)), strict=True))

    def due_window(self, start: int, now: int, limit: int) -> tuple[list[np.ndarray], bool]:
        """Entries in key order from the `start`-th: those due at `now`, at most `limit`
        of them, then the first one not due, as the five columns (int64, the last two
        int32 as a persisted index holds them); and whether more due entries may follow
        (the limit cut the window short)."""
        order = self._sorted()
        seqs = order[start:start + limit]
        due = int(np.searchsorted(self.da.get(seqs), now, side="right"))
        more = due == len(seqs) and start + limit < len(order)
        cols = self.columns_of(seqs[:due + 1])
        cols[3] = cols[3].astype(np.int32)
        cols[4] = cols[4].astype(np.int32)
        return cols, more

    def entries(self, start: int = 0) -> Iterator[Entry]:
        """Entries in key order from the `start`-th, produced in growing chunks (a reader
        that stops early decodes little). The order is taken now: appends made while the
        iterator is consumed do not disturb it."""
        return self._walk(self._sorted(), start)

    def _walk(self, order: np.ndarray, i: int) -> Iterator[Entry]:
        chunk = _FIRST_CHUNK
        while i < len(order):
            j = min(len(order), i + chunk)
            yield from self.entry_rows(order[i:j])
            i = j
            chunk = min(chunk * 4, _MAX_CHUNK)

    def start_after(self, after: tuple[int, int] | None) -> int:
        """Rank of the first entry that may hold a record with key > `after` (the batch
        holding `after` itself if it has records past it)."""
        if after is None or not self:
            return 0
        da_c, off_c = after
        order = self._sorted()
        lo = self._rank(da_c, False)
        hi = self._rank(da_c, True)
        if lo == hi:
            return lo
        # within equal deliverAfter, arrival order is offset order
        bases = self.rel.get(order[lo:hi]) + self.base0
        k = lo + int(np.searchsorted(bases, off_c, side="right"))
        if k > lo:
            prev = self.entry_rows(order[k - 1:k])[0]
            if prev[1] + prev[3] > off_c:
                k -= 1
        return k

    def min_deliver_after(self) -> int | None:
        return int(self.da.raw().min()) + self.da.base if self else None

    def max_entry(self) -> Entry | None:
        return self.entry_rows(self._sorted()[-1:])[0] if self else None

    def first_after(self, now: int) -> int | None:
        """The smallest deliverAfter > `now`, or None."""
        if not self:
            return None
        order = self._sorted()
        j = self._rank(now, True)
        return int(self.da.raw()[order[j]]) + self.da.base if j < len(order) else None

    def count_not_due(self, now: int) -> tuple[int, int]:
        """(records, batches) with deliverAfter > `now`."""
        if not self:
            return 0, 0
        order = self._sorted()
        j = self._rank(now, True)
        if j == len(order):
            return 0, 0
        lod = self.columns_of(order[j:])[3]
        return int((lod + 1).sum()), len(order) - j

    def not_due(self, now: int) -> Iterator[Entry]:
        """Entries with deliverAfter > `now`, in key order."""
        return self.entries(self._rank(now, True)) if self else iter(())

    def columns(self) -> list[np.ndarray]:
        """All entries as five int64 columns in key order (for persisting)."""
        return self.columns_of(self._sorted())
