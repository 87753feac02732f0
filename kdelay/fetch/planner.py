"""Fetch planning: which segments a page merges, from where, and what a page leaves for
the next.

A MergeCursor is the merge state of one cursor: the compiled KWayMerge (page_fill.pyx)
with a run per segment it has taken up, and the sealed segments it has not taken up yet,
in a heap by the smallest key each may hold after the cursor (the KIP's
deliverAfterSegments: a segment's smallest deliverAfter and base offset, or the cursor).
The merge takes up a segment only when that bound is due and below every head in the
merge (PLAN), so a page touches the segments that can contribute to it and no other: a
segment whose records all lie later is not even opened, and one whose entries are all
taken has left the merge's heap and costs nothing.

The state a page leaves is remembered against the page's `next` key (ResumePoints): a
consumer that follows `next` goes on with the same merge, every head where it stood, at
O(log k) per batch and nothing per segment. The active segment's runs are built afresh
for every page (its recent entries change with every append); a roll hands the sealed
segment to the pending heap; cancellations made since are picked up per segment changed.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Generic, TypeVar

from ..log.batch import codec
from ..log.batch.record_decode import shared_headers
from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..records import NO_HEADERS, DeliveryKey, FetchedRecord
from .page_fill import KWayMerge, Window
from .runs import ArrivalsRun, ColumnRun, RecentRun, RemoteColumnRun, empty_offsets

if TYPE_CHECKING:  # a process without tiered storage never loads it
    from ..log.tiered.remote_segment import RemoteSegment

# remote segments whose indexes a read by offset fetches in the background ahead of use
# (KIP-1003; the due-order merge fetches none ahead: it takes up one segment at a time)
PREFETCH_SEGMENTS = 8

Key = tuple[int, int]  # (deliverAfter, offset)


class PendingSegments:
    """The sealed segments a MergeCursor has not taken up, by the smallest key each may
    hold after its cursor: those that overlap the cursor (bound: the cursor) and those
    sealed since it was made, in a heap; the rest are walked in the segment set's own
    order by (earliest deliverAfter, base offset), never copied, so a new cursor costs
    O(segments overlapping it), nothing for the segments after it. `peek` and `pop`
    O(log segments)."""

    __slots__ = ("_segments", "_heap", "_walked", "_next")

    def __init__(self, segments: SegmentSet, key: Key | None):
        self._segments = segments
        self._heap: list[tuple[Key, int, LogSegment | RemoteSegment]] = []
        if key is not None:
            for seg in segments.sealed_starting_upto(key):
                max_key = seg.max_key
                if max_key is not None and max_key > key:
                    self._heap.append((key, seg.base_offset, seg))
            heapq.heapify(self._heap)
        self._walked: Key | None = key  # the walk takes segments starting above this
        self._next: tuple[Key, LogSegment | RemoteSegment] | None | bool = False  # False: unknown

    def _walk_next(self) -> tuple[Key, LogSegment | RemoteSegment] | None:
        if self._next is False:
            self._next = self._segments.first_starting_after(self._walked)
        return self._next  # type: ignore[return-value]

    def join_rolled(self, segments: SegmentSet, sealed_upto: int, key: Key | None) -> int:
        """The segments sealed since the active one was `sealed_upto` (rolls since this was
        made) that may hold a key after `key` join, each by `rolled`; returns the active
        segment's base offset now, the next call's `sealed_upto`. O(segments rolled)."""
        active_base = segments.active.base_offset
        if sealed_upto != active_base:
            for seg in segments.between(sealed_upto, active_base):
                max_key = seg.max_key
                if max_key is not None and (key is None or max_key > key):
                    self.rolled(seg, key)
        return active_base

    def rolled(self, seg: LogSegment | RemoteSegment, key: Key | None) -> None:
        """`seg` was sealed after this was made: the walk reaches it if it starts above
        where the walk stands, else it goes in the heap (bound: above the cursor `key`)."""
        self._next = False  # the walk's next may be this one now
        if seg.min_deliver_after is None:  # empty: no key to merge (callers pass none)
            return
        low = (seg.min_deliver_after, seg.base_offset)
        if self._walked is not None and low <= self._walked:
            heapq.heappush(self._heap, (low if key is None or low > key else key,
                                        seg.base_offset, seg))

    def peek(self) -> Key | None:
        """The smallest bound of a pending segment (None: there is none)."""
        walk = self._walk_next()
        heap = self._heap
        if heap and (walk is None or heap[0][0] <= walk[0]):
            return heap[0][0]
        return None if walk is None else walk[0]

    def pop(self) -> tuple[Key, int, LogSegment | RemoteSegment]:
        """(bound, base offset, segment) of the pending segment with the smallest bound."""
        walk = self._walk_next()
        heap = self._heap
        if heap and (walk is None or heap[0][0] <= walk[0]):
            return heapq.heappop(heap)
        if walk is None:
            raise IndexError("no pending segment")
        self._walked, self._next = walk[0], False
        return walk[0], walk[1].base_offset, walk[1]


class MergeCursor:
    """The merge state of one cursor (see the module docstring). Slots of `merge` are
    numbered as `runs`; `slot_of` finds a sealed segment's slot by base offset.

    `sealed_upto` is the active segment's base when this was last planned (every segment
    below it was considered) and `log_start` the log start then (a deletion forces a new
    state)."""

    __slots__ = ("merge", "runs", "slot_of", "pending", "remote", "active_slots",
                 "sealed_upto", "log_start", "cancels_seen")

    def __init__(self, pending: PendingSegments, sealed_upto: int, log_start: int,
                 cancels_seen: int):
        self.merge = KWayMerge(codec.HEADER_LAYOUT, FetchedRecord, NO_HEADERS, shared_headers)
        self.runs: list = []  # slot -> run (None: free)
        self.slot_of: dict[int, int] = {}
        self.pending = pending  # sealed segments not in the merge
        self.remote: set[int] = set()  # slots of remote runs, whose windows expire
        self.active_slots: list[int] = []
        self.sealed_upto = sealed_upto
        self.log_start = log_start
        self.cancels_seen = cancels_seen

    # ------------------------------------------------------------------ slots

    def set_window(self, slot: int, now: int, limit: int,
                   cancels: CancelStore | None) -> None:
        """Give slot `slot` its run's window from the run's position. O(log k)."""
        run = self.runs[slot]
        seg = run.seg
        mapped = seg.mapped()  # before the window: its bytes are ready in this mapping
        cols, start, end, more, ready = run.window(now, limit)
        sc = None if cancels is None else cancels.get(seg.base_offset)
        gone = (empty_offsets, empty_offsets) if sc is None else sc.sorted_parts()
        self.merge.set(slot, Window(mapped, seg.size, cols, end, more, ready, *gone), start)

    def _add(self, run, now: int, limit: int, cancels: CancelStore | None) -> int:
        slot = len(self.runs)
        self.runs.append(run)
        self.set_window(slot, now, limit, cancels)
        return slot

    def take_up(self, key: Key | None, now: int, limit: int,
                cancels: CancelStore | None) -> None:
        """Add to the merge the pending segment with the smallest bound (the fill asked:
        it may hold the next key), from its first entry past `key` (the page's cursor:
        every key the page took is below all of its). One at a time, and nothing fetched
        ahead: the segment taken up next may never be needed (the page may fill first)."""
        low, base, seg = self.pending.pop()
        # a bound above the cursor is the segment's own smallest key: it starts there
        run = column_run(seg, None if key is None or low > key else key)
        self.slot_of[base] = slot = self._add(run, now, limit, cancels)
        if not isinstance(seg, LogSegment):
            self.remote.add(slot)

    def set_active(self, runs: list, now: int, limit: int,
                   cancels: CancelStore | None) -> None:
        """The active segment's runs, afresh, in the slots of the last page's."""
        free = self.active_slots
        for slot in free:
            self.merge.clear(slot)
            self.runs[slot] = None
        slots = []
        for run in runs:
            if free:
                slot = free.pop()
                self.runs[slot] = run
                self.set_window(slot, now, limit, cancels)
            else:
                slot = self._add(run, now, limit, cancels)
            slots.append(slot)
        self.active_slots = slots

    def refresh(self, now: int, limit: int, cancels: CancelStore | None) -> None:
        """New windows for the segments whose cancellations changed since the last page
        (per segment changed), and for remote runs (their fetched bytes may have been
        dropped since)."""
        again = set()
        if cancels is not None and cancels.changes != self.cancels_seen:
            for base in cancels.changed_since(self.cancels_seen):
                slot = self.slot_of.get(base)
                if slot is not None:
                    again.add(slot)
            self.cancels_seen = cancels.changes
        merge = self.merge
        for slot in list(self.remote):
            if merge.live(slot):
                again.add(slot)
            else:
                self.remote.discard(slot)
        for slot in again:
            if merge.live(slot):
                self.runs[slot].moved_to(merge.head(slot))
                self.set_window(slot, now, limit, cancels)


State = TypeVar("State")


class ResumePoints(Generic[State]):
    """The merge state each recent read left behind, keyed by its `next` (the page fill's
    MergeCursor; the due-batch reader's merge, fetch/due_batches.py), the `capacity` most
    recent kept. O(1) per call.

    For a cursor C the right start in a run is its first entry that may hold a key > C.
    Merge order guarantees every head left unconsumed by a read ending at C is exactly
    that entry, so a remembered state resumes correctly for as long as its segments exist.
    A state is handed out once (`take`): the read that takes it moves it on."""

    def __init__(self, capacity: int = 16):
        self._points: OrderedDict[DeliveryKey, State] = OrderedDict()
        self._capacity = capacity

    def clear(self) -> None:
        self._points.clear()

    def __iter__(self) -> Iterator[DeliveryKey]:
        """The cursors kept, least recently remembered first."""
        return iter(self._points)

    def take(self, cursor: DeliveryKey | None) -> State | None:
        if cursor is None:
            return None
        return self._points.pop(cursor, None)

    def remember(self, cursor: DeliveryKey | None, state: State) -> None:
        if cursor is None:
            return
        self._points[cursor] = state
        self._points.move_to_end(cursor)
        while len(self._points) > self._capacity:
            self._points.popitem(last=False)


def cursor_key(cursor: DeliveryKey | None) -> Key | None:
    return None if cursor is None else (cursor.deliver_after, cursor.offset)


def column_run(seg: LogSegment | RemoteSegment, key: Key | None) -> ColumnRun:
    """A run over `seg`'s persisted index columns from the first entry past `key`."""
    idx = seg.dly_index
    args = ((seg.base_offset, idx.generation), idx.chunks, idx.start_in_columns(key))
    if isinstance(seg, LogSegment):
        return ColumnRun(seg, *args)
    return RemoteColumnRun(seg, *args)


def merge_state(segments: SegmentSet, resume: ResumePoints, cursor: DeliveryKey | None,
                now: int, limit: int, cancels: CancelStore | None) -> MergeCursor:
    """The merge state for a page from `cursor`: resumed from the page that ended there
    when possible, else a new one, whose pending segments are every sealed segment with a
    key after the cursor (O(log segments + those overlapping the cursor), touching none
    of their indexes); segments sealed since are added to them, and the active segment's runs are built
    afresh."""
    key = cursor_key(cursor)
    state = resume.take(cursor)
    active = segments.active
    log_start = segments.oldest.base_offset
    if state is None or state.log_start != log_start:
        state = MergeCursor(PendingSegments(segments, key), active.base_offset, log_start,
                            0 if cancels is None else cancels.changes)
    else:
        state.sealed_upto = state.pending.join_rolled(segments, state.sealed_upto, key)
        state.refresh(now, limit, cancels)
    state.set_active(active_runs(active, key), now, limit, cancels)
    return state


def prefetch_indexes(segments: Iterable[LogSegment | RemoteSegment],
                     suffixes: Sequence[str]) -> None:
    """Have the first PREFETCH_SEGMENTS remote ones among `segments` fetch their indexes
    `suffixes` in the background, so that they arrive together rather than one after
    another."""
    remote = (s for s in segments if not isinstance(s, LogSegment))
    for seg in islice(remote, PREFETCH_SEGMENTS):
        seg.prefetch_indexes(suffixes)


def active_runs(active: LogSegment, key: Key | None) -> list:
    """Runs of the active segment, built afresh: its recent part changes with every append
    (and its persisted part, present after a clean reopen, is one search)."""
    idx = active.dly_index
    runs: list = []
    if idx.chunks.n:
        runs.append(column_run(active, key))
    if idx.has_recent:
        runs.append(RecentRun(active, idx, idx.recent_start(key)))
        runs.append(ArrivalsRun(active, idx, key))
    return runs
