"""The due-order read: a k-way heap merge of per-segment DeliverAfterIndex runs.

Each segment contributes runs of index entries after the cursor, already in (deliverAfter,
offset) order: its persisted (memmap'd, immutable) columns and, for the active segment, the
SortedList of entries appended since. The merge pops the smallest head, so a page touches
only the entries it returns plus one head per run. Work is per batch: each batch is read
and verified once, its records decoded column-wise, and only the slice the page needs
becomes FetchedRecords.

The sealed segments' runs a page leaves behind are remembered against the page's `next`
key (ResumePoints): a consumer that follows `next` resumes every segment where it stood,
with no search and no re-conversion of index entries, and segments with nothing due yet
stay parked until the clock reaches them, so a page costs O(runs with due records).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from itertools import repeat
from typing import NamedTuple, Protocol

import numpy as np

from ..errors import CorruptLogError
from ..index.deliver_after_index import Entry
from ..log import codec
from ..records import DeliveryKey, FetchedRecord

_FIRST_CHUNK = 8
_MAX_CHUNK = 64  # bounds the Python tuples a remembered run holds
_new_record = tuple.__new__


class BatchSource(Protocol):
    """What the merge needs of a segment."""

    log_path: str

    def read_verified(self, position: int, size: int, expected_base: int
                      ) -> tuple[codec.BatchHeader, bytes]: ...


class ColumnRun:
    """Entries of immutable index columns from index `start` on, converted to Python
    tuples a growing chunk at a time (a short page converts only a few)."""

    __slots__ = ("seg", "key", "cols", "i", "n", "head", "_buf", "_b0", "_chunk")

    def __init__(self, seg: BatchSource, key: tuple, cols: list[np.ndarray], start: int):
        self.seg, self.key, self.cols = seg, key, cols
        self.i, self.n = start, len(cols[0])
        self._chunk = _FIRST_CHUNK
        self._buf: list[Entry] = []
        self._b0 = start
        self.head: Entry | None = None
        if start < self.n:
            self._fill()

    def _fill(self) -> None:
        i, j = self.i, min(self.n, self.i + self._chunk)
        self._buf = list(zip(*(c[i:j].tolist() for c in self.cols), strict=True))
        self._b0 = i
        self._chunk = min(self._chunk * 4, _MAX_CHUNK)
        self.head = self._buf[0]

    def advance(self) -> None:
        self.i += 1
        k = self.i - self._b0
        if k < len(self._buf):
            self.head = self._buf[k]
        elif self.i < self.n:
            self._fill()
        else:
            self.head = None


class PendingRun:
    """Entries of the active segment's in-memory SortedList (mutable: never cached)."""

    __slots__ = ("seg", "head", "_it")

    def __init__(self, seg: BatchSource, entries: Iterator[Entry]):
        self.seg = seg
        self._it = entries
        self.head = next(entries, None)

    def advance(self) -> None:
        self.head = next(self._it, None)


class Page(NamedTuple):
    records: list[FetchedRecord]
    next: DeliveryKey | None
    next_pending: int | None  # deliverAfter of the first entry not yet due (None: none seen)


class SealedRuns:
    """The merge state of every sealed segment for one cursor: a run per segment that can
    hold a due record after it, and the segments parked because nothing in them is due
    yet (a heap by earliest deliverAfter, unparked as the clock reaches them).

    `sealed_upto` is the active segment's base when this was built (every segment below
    it was considered) and `log_start` the log start then (a deletion forces a rebuild)."""

    __slots__ = ("runs", "parked", "sealed_upto", "log_start")

    def __init__(self, sealed_upto: int, log_start: int):
        self.runs: list[ColumnRun] = []
        self.parked: list[tuple[int, int, BatchSource]] = []
        self.sealed_upto = sealed_upto
        self.log_start = log_start


class ResumePoints:
    """The sealed-segment merge state each recent page left behind, keyed by its `next`.

    For a cursor C the right start in a run is its first entry that may hold a key > C.
    Merge order guarantees every run head left unconsumed by a page ending at C is exactly
    that entry, so a remembered run resumes correctly for as long as its segment exists.
    A state is handed out once (`take`): the fetch that takes it moves its runs on."""

    def __init__(self, capacity: int = 16):
        self._points: OrderedDict[DeliveryKey, SealedRuns] = OrderedDict()
        self._capacity = capacity

    def take(self, cursor: DeliveryKey | None) -> SealedRuns | None:
        if cursor is None:
            return None
        return self._points.pop(cursor, None)

    def remember(self, cursor: DeliveryKey | None, state: SealedRuns) -> None:
        if cursor is None:
            return
        state.runs = [r for r in state.runs if r.head is not None]
        self._points[cursor] = state
        self._points.move_to_end(cursor)
        while len(self._points) > self._capacity:
            self._points.popitem(last=False)


def batch_records(h: codec.BatchHeader, data: bytes, skip: int, limit: int,
                  source: BatchSource, position: int) -> list[FetchedRecord]:
    """Records `skip` .. `skip + limit` of a verified batch as FetchedRecords."""
    cols = codec.decode_records(data, h, path=source.log_path, file_pos=position)
    stop = min(h.record_count, skip + limit)
    if skip == 0 and stop == h.record_count:
        ts, keys, values, headers = cols
    else:
        ts, keys, values, headers = (c[skip:stop] for c in cols)
    offsets = range(h.base_offset + skip, h.base_offset + stop)
    rows = zip(offsets, repeat(h.deliver_after), ts, keys, values, headers, repeat(None))
    return list(map(_new_record, repeat(FetchedRecord), rows))


def read_page(runs: list, after: DeliveryKey | None, now: int, max_records: int,
              max_bytes: int) -> Page:
    """Fill one page by merging `runs`: records with key > `after` and deliverAfter <= `now`,
    at most `max_records`, and `max_bytes` as a soft cap (at least one batch). Each run is
    left positioned at its first entry not fully consumed."""
    out: list[FetchedRecord] = []
    taken_bytes = 0
    next_pending = None
    heap = [(r.head[0], r.head[1], k) for k, r in enumerate(runs) if r.head is not None]
    heapq.heapify(heap)
    while heap:
        da, base, k = heap[0]
        if da > now:
            next_pending = da
            break
        run = runs[k]
        _, _, pos, lod, size = run.head
        skip = 0
        if after is not None and da == after.deliver_after and base <= after.offset:
            skip = after.offset - base + 1
        if skip <= lod:
            if out and taken_bytes + size > max_bytes:
                break
            h, data = run.seg.read_verified(pos, size, base)
            if h.deliver_after != da or h.last_offset_delta != lod:
                raise CorruptLogError(f"batch disagrees with its index entry ({da}, {base})",
                                      run.seg.log_path, pos)
            want = max_records - len(out)
            out.extend(batch_records(h, data, skip, want, run.seg, pos))
            taken_bytes += size
            if lod + 1 - skip > want:
                break  # page full inside this batch: the run stays on it
        run.advance()
        if run.head is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (run.head[0], run.head[1], k))
        if len(out) >= max_records:
            break
    nxt = DeliveryKey(out[-1].deliver_after, out[-1].offset) if out else after
    return Page(out, nxt, next_pending)
