"""Due batches: the due-order read at the grain of stored batches. A merge of the same runs
as the page fill's (planner.py's runs and pending segments), but what it hands out is each
due batch whole, as stored (its key, the offsets cancelled in it, and, when asked, its
bytes checked by entry_check's rule), with no record decoded.

The merge a read leaves is remembered against the read's next cursor (as the page fill's
MergeCursor in planner.ResumePoints): a reader that goes on from there (the broker's view
numbering what came due, a consumer fetching on) resumes with every sealed segment's run
where it stood and the pending segments as they were; only the active segment's runs are
built afresh. A roll adds the newly sealed segments to the pending ones; a deletion from
the log's start, or segments replaced (compaction, the tiered sync: `reset`), start anew.

The broker's due-order view (kdelay/broker/delivery_view.py) numbers the records of these
batches with delivery offsets and serves their bytes with rewritten headers, so its cost
is per batch, not per record.

Cost of a page: resumed, O(runs in the merge) to replace the active segment's runs; else
O(sealed segments overlapping the cursor) to find where to start (nothing for the
segments after it, which join one at a time as the merge reaches their earliest key);
then per batch one heap step, and with bytes one CRC-32C pass over the batch where it
lies in the segment's memory mapping (handed out as a view, not copied); cancelled offsets are looked up (two binary searches) only in
segments that have any.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np

from ..index.entry import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    Entry,
)
from ..log.batch.entry_check import check_batch
from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..records import DeliveryKey
from . import planner

# the most index entries one window of a run offers (a longer page refills it)
_WINDOW = 1024
_NONE: tuple[int, ...] = ()
_new_tuple = tuple.__new__  # an Entry without the NamedTuple's Python-level __new__


class DueBatch(NamedTuple):
    """One stored batch that is due: its key range, the offsets cancelled in it (sorted;
    they never come due), and the stored bytes (a magic-3 batch, checked; a view of a local
    segment's mapping, else bytes) or None."""
    deliver_after: int
    base_offset: int
    last_offset: int
    cancelled: tuple[int, ...]
    data: bytes | memoryview | None


class _Resumed:
    """The merge a read left, for the read that goes on from its next cursor."""
    __slots__ = ("merge", "pending", "sealed_upto", "log_start")

    def __init__(self, merge: _Merge, pending: planner.PendingSegments, sealed_upto: int,
                 log_start: int):
        self.merge, self.pending = merge, pending
        self.sealed_upto, self.log_start = sealed_upto, log_start


class DueBatchReader:
    """Reads due batches after a cursor. Sealed segments join the merge lazily, in the
    order of the smallest key each may hold after the cursor (planner.PendingSegments, the
    KIP's deliverAfterSegments): one whose records all lie later is never opened. The
    merges recent reads left are kept by their next cursors (see the module)."""

    def __init__(self, capacity: int = 16) -> None:
        self._points: planner.ResumePoints[_Resumed] = planner.ResumePoints(capacity)

    def reset(self) -> None:
        """Forget every remembered merge (segments were replaced)."""
        self._points.clear()

    def _state(self, segments: SegmentSet, cursor: DeliveryKey | None, key, now: int
               ) -> _Resumed:
        """The merge for a read from `cursor`: the one a read ending there left, brought
        up to date, else a new one."""
        active = segments.active
        log_start = segments.oldest.base_offset
        state = self._points.take(cursor)
        if state is None or state.log_start != log_start:
            return _Resumed(_Merge([], now), planner.PendingSegments(segments, key),
                            active.base_offset, log_start)
        state.sealed_upto = state.pending.join_rolled(segments, state.sealed_upto, key)
        state.merge.drop_active(now)
        return state

    def read(self, segments: SegmentSet, cursor: DeliveryKey | None, now: int,
             max_batches: int, max_bytes: int, cancels: CancelStore | None,
             with_bytes: bool) -> tuple[list[DueBatch], DeliveryKey | None]:
        """(batches, next cursor): the batches holding a record with key > `cursor` and
        deliverAfter <= `now`, in key order, whole (the first may hold records at or
        before the cursor), at most `max_batches` and, counting stored sizes,
        `max_bytes` (at least one batch). `next` is the last batch's last key."""
        key = planner.cursor_key(cursor)
        state = self._state(segments, cursor, key, now)
        pending, merge = state.pending, state.merge
        for run in planner.active_runs(segments.active, key):
            merge.add(run, active=True)
        out: list[DueBatch] = []
        taken = 0
        after = (-1, -1) if key is None else key
        while len(out) < max_batches:
            head = merge.head(now)
            bound = pending.peek()
            if bound is not None and bound[0] <= now and (head is None
                                                          or bound <= (head[0], head[1])):
                low, _, seg = pending.pop()  # it may hold the next key: take it up
                merge.add(planner.column_run(seg, None if key is None or low > key
                                             else key))
                continue
            if head is None:
                break
            da, base, pos, lod, size, k = head
            last = base + lod
            if (da, last) > after:
                if out and taken + size > max_bytes:
                    break
                seg = merge.runs[k].seg
                data = _read(seg, _new_tuple(Entry, (da, base, pos, lod, size))) \
                    if with_bytes else None
                out.append(DueBatch(da, base, last, _cancelled_in(cancels, seg.base_offset,
                                                                  base, last), data))
                taken += size
            merge.advance(k)
        merge.leave()
        nxt = DeliveryKey(out[-1].deliver_after, out[-1].last_offset) if out else cursor
        # every head the merge left is the first entry of its run past `nxt` (merge order)
        self._points.remember(nxt, state)
        return out, nxt


class _Merge:
    """A k-way merge of the runs' windows by (deliverAfter, base offset). Runs of the
    active segment (added with active=True) are dropped by `drop_active` before a resumed
    read adds them afresh; their slots are reused."""

    def __init__(self, runs: list, now: int):
        self.runs: list = []
        self._active: list[int] = []  # slots of the active segment's runs
        self._free: list[int] = []    # slots of dropped runs, to reuse
        self._now = now
        self._cols: list = []
        self._end: list[int] = []
        self._more: list[bool] = []
        self._head: list[int] = []
        self._start: list[int] = []  # where each window starts, in its run's terms
        self._heap: list[tuple[int, int, int]] = []
        for run in runs:
            self.add(run)

    def add(self, run, active: bool = False) -> None:
        """One more run in the merge. O(log k) plus its first window."""
        if self._free:
            k = self._free.pop()
            self.runs[k] = run
        else:
            k = len(self.runs)
            self.runs.append(run)
            self._cols.append(None)
            self._end.append(0)
            self._more.append(False)
            self._head.append(0)
            self._start.append(0)
        if active:
            self._active.append(k)
        self._refill(k)

    def drop_active(self, now: int) -> None:
        """Take the active segment's runs out (their entries change with every append) and
        read at `now` from here on. O(runs)."""
        self._now = now
        if not self._active:
            return
        gone = set(self._active)
        self._heap = [e for e in self._heap if e[2] not in gone]
        heapq.heapify(self._heap)
        for k in self._active:
            self.runs[k] = None
            self._cols[k] = None
        self._free += self._active
        self._active = []

    def _refill(self, k: int) -> None:
        cols, start, end, more, _ = self.runs[k].window(self._now, _WINDOW)
        if end - start > _WINDOW:  # a persisted run offers all it has checked
            end, more = start + _WINDOW, True
        self._cols[k] = [np.asarray(c[start:end]).tolist() for c in cols]
        self._end[k], self._more[k] = end - start, more
        self._head[k] = 0
        self._start[k] = start
        if end > start:
            cols = self._cols[k]
            heapq.heappush(self._heap, (cols[E_DELIVER_AFTER][0], cols[E_BASE_OFFSET][0], k))

    def head(self, now: int) -> tuple[int, int, int, int, int, int] | None:
        """(deliverAfter, base, position, lastOffsetDelta, size, run) of the smallest due
        entry, or None when nothing more is due."""
        if not self._heap or self._heap[0][0] > now:
            return None
        da, base, k = self._heap[0]
        i = self._head[k]
        cols = self._cols[k]
        return da, base, cols[E_POSITION][i], cols[E_LAST_OFFSET_DELTA][i], cols[E_SIZE][i], k

    def advance(self, k: int) -> None:
        """Consume run k's head entry."""
        i = self._head[k] = self._head[k] + 1
        cols = self._cols[k]
        if i < self._end[k]:
            heapq.heapreplace(self._heap, (cols[E_DELIVER_AFTER][i], cols[E_BASE_OFFSET][i], k))
            return
        heapq.heappop(self._heap)
        if self._more[k]:
            self.runs[k].moved_to(self._start[k] + i)
            self._refill(k)

    def leave(self) -> None:
        """Tell every run where the merge left it."""
        for k, run in enumerate(self.runs):
            if run is not None:
                run.moved_to(self._start[k] + self._head[k])


def _read(seg, entry: Entry) -> bytes | memoryview:
    """The batch `entry` points at, checked (entry_check's rule): a read-only view of a
    local segment's memory mapping, where the file holds it (not copied: the view keeps
    the mapping alive, see mapped_file.pyx), else as the segment reads it (a remote one
    fetches it; a local one past its size raises what a read there raises)."""
    pos, size = entry.position, entry.size
    if isinstance(seg, LogSegment) and pos >= 0 and pos + size <= seg.size:
        data = seg.mapped().view(pos, size)
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
