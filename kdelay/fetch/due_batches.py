"""Due batches: the due-order read at the grain of stored batches. The same merge of the
same runs as due_merge.py (planned by planner.py, resumed across pages the same way), but
what it hands out is each due batch whole, as stored (its key, the offsets cancelled in it,
and, when asked, its bytes checked by entry_check's rule), with no record decoded.

The broker's due-order view (kdelay/broker/delivery_view.py) numbers the records of these
batches with delivery offsets and serves their bytes with rewritten headers, so its cost
is per batch, not per record.

Cost of a page: planning as DueOrderReader's (resumed: O(runs with due batches)), then per
batch one heap step, and with bytes one copy out of the segment's memory mapping and one
CRC-32C pass; cancelled offsets are
looked up (two binary searches) only in segments that have any.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np

from ..log.batch.entry_check import check_batch
from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..records import DeliveryKey
from . import planner

# the most index entries one window of a run offers (a longer page refills it)
_WINDOW = 1024
_NONE: tuple[int, ...] = ()


class DueBatch(NamedTuple):
    """One stored batch that is due: its key range, the offsets cancelled in it (sorted;
    they never come due), and the stored bytes (a magic-3 batch, checked) or None."""
    deliver_after: int
    base_offset: int
    last_offset: int
    cancelled: tuple[int, ...]
    data: bytes | None


class DueBatchReader:
    """Reads due batches after a cursor; keeps the sealed segments' merge state that each
    page leaves behind (planner.ResumePoints), so a reader following its `next` resumes."""

    def __init__(self) -> None:
        self._resume = planner.ResumePoints()

    def reset(self) -> None:
        """Forget the remembered merge state (segments were replaced or moved)."""
        self._resume = planner.ResumePoints()

    def read(self, segments: SegmentSet, cursor: DeliveryKey | None, now: int,
             max_batches: int, max_bytes: int, cancels: CancelStore | None,
             with_bytes: bool) -> tuple[list[DueBatch], DeliveryKey | None]:
        """(batches, next cursor): the batches holding a record with key > `cursor` and
        deliverAfter <= `now`, in key order, whole (the first may hold records at or
        before the cursor), at most `max_batches` and, counting stored sizes,
        `max_bytes` (at least one batch). `next` is the last batch's last key."""
        sealed = planner.sealed_runs(segments, self._resume, cursor, now)
        runs = sealed.runs + planner.active_runs(segments.active, cursor)
        merge = _Merge(runs, now)
        out: list[DueBatch] = []
        taken = 0
        after = (-1, -1) if cursor is None else (cursor.deliver_after, cursor.offset)
        while len(out) < max_batches:
            head = merge.head(now)
            if head is None:
                break
            da, base, pos, lod, size, k = head
            last = base + lod
            if (da, last) > after:
                if out and taken + size > max_bytes:
                    break
                seg = runs[k].seg
                data = None
                if with_bytes:
                    data = _read(seg, (da, base, pos, lod, size))
                out.append(DueBatch(da, base, last, _cancelled_in(cancels, seg.base_offset,
                                                                  base, last), data))
                taken += size
            merge.advance(k)
        merge.leave()
        nxt = DeliveryKey(out[-1].deliver_after, out[-1].last_offset) if out else cursor
        self._resume.remember(nxt, sealed)
        return out, nxt


class _Merge:
    """A k-way merge of the runs' windows by (deliverAfter, base offset)."""

    def __init__(self, runs: list, now: int):
        self._runs = runs
        self._now = now
        self._cols: list = [None] * len(runs)
        self._end = [0] * len(runs)
        self._more = [False] * len(runs)
        self._head = [0] * len(runs)
        self._start = [0] * len(runs)  # where each window starts, in its run's terms
        self._heap: list[tuple[int, int, int]] = []
        for k in range(len(runs)):
            self._refill(k)

    def _refill(self, k: int) -> None:
        cols, start, end, more, _ = self._runs[k].window(self._now, _WINDOW)
        if end - start > _WINDOW:  # a persisted run offers all it has checked
            end, more = start + _WINDOW, True
        self._cols[k] = [np.asarray(c[start:end]).tolist() for c in cols]
        self._end[k], self._more[k] = end - start, more
        self._head[k] = 0
        self._start[k] = start
        if end > start:
            heapq.heappush(self._heap, (self._cols[k][0][0], self._cols[k][1][0], k))

    def head(self, now: int) -> tuple[int, int, int, int, int, int] | None:
        """(deliverAfter, base, position, lastOffsetDelta, size, run) of the smallest due
        entry, or None when nothing more is due."""
        if not self._heap or self._heap[0][0] > now:
            return None
        da, base, k = self._heap[0]
        i = self._head[k]
        cols = self._cols[k]
        return da, base, cols[2][i], cols[3][i], cols[4][i], k

    def advance(self, k: int) -> None:
        """Consume run k's head entry."""
        i = self._head[k] = self._head[k] + 1
        cols = self._cols[k]
        if i < self._end[k]:
            heapq.heapreplace(self._heap, (cols[0][i], cols[1][i], k))
            return
        heapq.heappop(self._heap)
        if self._more[k]:
            self._runs[k].moved_to(self._start[k] + i)
            self._refill(k)

    def leave(self) -> None:
        """Tell every run where the merge left it."""
        for k, run in enumerate(self._runs):
            run.moved_to(self._start[k] + self._head[k])


def _read(seg, entry: tuple[int, int, int, int, int]) -> bytes:
    """The batch `entry` points at, checked (entry_check's rule): from a local segment's
    memory mapping, where the file holds it, else as the segment reads it (a remote one
    fetches it; a local one past its size raises what a read there raises)."""
    pos, size = entry[2], entry[4]
    if isinstance(seg, LogSegment) and pos >= 0 and pos + size <= seg.size:
        data = seg.mapped().read(pos, size)
        check_batch(data, 0, entry, path=seg.log_path)
        return data
    return seg.read_verified(entry)[1]


def _cancelled_in(cancels: CancelStore | None, seg_base: int, first: int,
                  last: int) -> tuple[int, ...]:
    sc = None if cancels is None else cancels.get(seg_base)
    if sc is None:
        return _NONE
    out: list[int] = []
    for part in sc.sorted_parts():
        lo, hi = np.searchsorted(part, [first, last + 1])
        if hi > lo:
            out += part[lo:hi].tolist()
    return tuple(sorted(out)) if out else _NONE
