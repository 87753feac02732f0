"""Fetch planning: which segments a page must merge, and from where.

For a cursor, every sealed segment whose largest key is after it contributes a ColumnRun
started at its first entry that may hold a record past the cursor; segments with nothing
due yet are parked (a heap by earliest deliverAfter) until the clock reaches them. The
active segment contributes its persisted columns and its recent (unpersisted) entries,
built afresh each fetch.

The sealed segments' runs a page leaves behind are remembered against the page's `next`
key (ResumePoints): a consumer that follows `next` resumes every segment where it stood,
with no search and no re-conversion of index entries, so a page costs O(runs with due
records) rather than O(segments).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING

from ..log.segments.layout import DLYINDEX_SUFFIX
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..records import DeliveryKey
from .runs import ArrivalsRun, BatchSource, ColumnRun, RecentRun, RemoteColumnRun

if TYPE_CHECKING:  # a process without tiered storage never loads it
    from ..log.tiered.remote_segment import RemoteSegment

# remote segments whose indexes a plan fetches in the background ahead of use (KIP-1003)
PREFETCH_SEGMENTS = 8
DUE_ORDER_INDEXES = (DLYINDEX_SUFFIX,)  # what the merge reads of a segment's indexes


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
        state.runs = [r for r in state.runs if not r.exhausted]
        self._points[cursor] = state
        self._points.move_to_end(cursor)
        while len(self._points) > self._capacity:
            self._points.popitem(last=False)


def _cursor_key(cursor: DeliveryKey | None) -> tuple[int, int] | None:
    return None if cursor is None else (cursor.deliver_after, cursor.offset)


def column_run(seg: LogSegment | RemoteSegment, key: tuple[int, int] | None) -> ColumnRun:
    """A run over `seg`'s persisted index columns from the first entry past `key`."""
    idx = seg.dly_index
    kind = ColumnRun if isinstance(seg, LogSegment) else RemoteColumnRun
    return kind(seg, (seg.base_offset, idx.generation), idx.chunks,
                idx.start_in_columns(key))


def sealed_runs(segments: SegmentSet, resume: ResumePoints, cursor: DeliveryKey | None,
                now: int) -> SealedRuns:
    """The sealed segments' merge state for `cursor`: resumed from the page that ended
    there when possible, else built. Segments with nothing after the cursor are never
    touched; segments with nothing due yet are parked until `now` reaches them."""
    key = _cursor_key(cursor)
    state = resume.take(cursor)
    active_base = segments.active.base_offset
    log_start = segments.oldest.base_offset
    if state is None or state.log_start != log_start:
        state = SealedRuns(active_base, log_start)
        planned = list(segments.sealed_after(key))
        prefetch_indexes((s for s in planned if s.min_deliver_after <= now), DUE_ORDER_INDEXES)
        for seg in planned:
            _plan_segment(state, seg, key, now)
    elif state.sealed_upto != active_base:  # rolled since: consider the new segments
        for seg in segments.between(state.sealed_upto, active_base):
            max_key = seg.max_key
            if max_key is not None and (key is None or max_key > key):
                _plan_segment(state, seg, key, now)
        state.sealed_upto = active_base
    parked = state.parked
    while parked and parked[0][0] <= now:
        _, _, seg = heapq.heappop(parked)
        state.runs.append(column_run(seg, key))
    return state


def prefetch_indexes(segments: Iterable[LogSegment | RemoteSegment],
                     suffixes: Sequence[str]) -> None:
    """Have the first PREFETCH_SEGMENTS remote ones among `segments` fetch their indexes
    `suffixes` in the background, so that they arrive together rather than one after
    another."""
    remote = (s for s in segments if not isinstance(s, LogSegment))
    for seg in islice(remote, PREFETCH_SEGMENTS):
        seg.prefetch_indexes(suffixes)


def _plan_segment(state: SealedRuns, seg: LogSegment, key: tuple[int, int] | None,
                  now: int) -> None:
    if seg.min_deliver_after <= now:
        state.runs.append(column_run(seg, key))
    else:
        heapq.heappush(state.parked, (seg.min_deliver_after, seg.base_offset, seg))


def active_runs(active: LogSegment, cursor: DeliveryKey | None) -> list:
    """Runs of the active segment, built afresh: its recent part changes with every append
    (and its persisted part, present after a clean reopen, is one search)."""
    key = _cursor_key(cursor)
    idx = active.dly_index
    runs: list = []
    if idx.chunks.n:
        runs.append(column_run(active, key))
    if idx.has_recent:
        runs.append(RecentRun(active, idx, idx.recent_start(key)))
        runs.append(ArrivalsRun(active, idx, key))
    return runs
