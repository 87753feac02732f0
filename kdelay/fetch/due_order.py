"""The due-order read: one page of due records after a cursor, in (deliverAfter, offset)
order, planned by planner.py and filled by due_merge.py.

DueOrderReader keeps what one fetch leaves for the next: the merge, its heads and the
segments it has not taken up yet (planner.MergeCursor, kept in ResumePoints by the page's
`next`), and, after an empty page, how long nothing after that cursor can come
due (its QuietGate, quiet_gate.pyx), so that an idle poll skips the merge entirely until
then or until an append that is due sooner: the facade asks the gate before anything else.
The Log's lock guards every call (the gate's `answer` needs none).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import KdelayError, OffsetOutOfRangeError
from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.segment_set import SegmentSet
from ..records import DeliveryKey, FetchedRecord, FetchResult
from ..validation import as_delivery_key, is_int
from . import planner
from .active_page import NEVER, active_page
from .due_merge import read_page, window_limit
from .long_poll import ActivitySignal, long_poll
from .quiet_gate import QuietGate

_new_tuple = tuple.__new__


def resolve_cursor(segments: SegmentSet, after: DeliveryKey | int | None
                   ) -> DeliveryKey | None:
    """A fetch's `after` as a key: an int offset stands for its record's key."""
    if after is None:
        return None
    key = as_delivery_key(after)
    if key is not None:
        return key
    if is_int(after):
        after = int(after)
        da = segments.deliver_after_of(after) if after >= 0 else None
        if da is None:
            start, end = segments.oldest.base_offset, segments.active.next_offset
            why = ("compaction removed it; pass the DeliveryKey of a fetch's `next` instead"
                   if start <= after < end else f"the log holds offsets [{start}, {end})")
            raise OffsetOutOfRangeError(f"offset {after} is not in the log: {why}")
        return DeliveryKey(da, after)
    raise KdelayError(f"after must be None, an int offset or a DeliveryKey, got {after!r}")


class DueOrderReader:
    def __init__(self) -> None:
        self._resume: planner.ResumePoints[planner.MergeCursor] = planner.ResumePoints()
        # from the last empty page: nothing after its cursor is due before its `until`;
        # appends lower `until` (QuietGate.appended)
        self.gate = QuietGate()

    def reset(self) -> None:
        """Forget every remembered merge state (segments were replaced by compaction)."""
        self._resume = planner.ResumePoints()
        self.gate.clear()

    def page(self, segments: SegmentSet, cursor: DeliveryKey | None, now: int,
             max_records: int, max_bytes: int, cancels: CancelStore | None = None
             ) -> tuple[list[FetchedRecord], DeliveryKey | None, int | None]:
        """(records, next cursor, until): with no records, nothing after `cursor` is due
        before `until` (NEVER if nothing is after it at all)."""
        gate = self.gate
        if gate.holds(cursor, now):
            return [], cursor, gate.until  # known: nothing after the cursor is due
        small = active_page(segments, cursor, now, max_records, max_bytes, cancels)
        if small is not None:  # only the active segment's recent entries can contribute
            records, nxt, until = small
            if until is not None:  # the page saw the end of what is due: a quiet spell
                gate.begin(nxt, until)  # after it, even when it returned records
            if records:
                return records, nxt, None
            if until is not None:
                return [], cursor, until
        limit = window_limit(max_records)
        state = planner.merge_state(segments, self._resume, cursor, now, limit, cancels)
        page = read_page(state, cursor, now, max_records, max_bytes, cancels)
        self._resume.remember(page.next, state)
        if page.records:
            return page.records, page.next, None
        # every record after the cursor is due at `until` or later: the smallest head not
        # yet due, or the smallest bound of a segment not taken up
        until = NEVER if page.next_pending is None else page.next_pending
        gate.begin(cursor, until)
        return [], cursor, until

    def fetch_page(self, segments: SegmentSet, cursor: DeliveryKey | None, now: int,
                   max_records: int, max_bytes: int, cancels: CancelStore) -> FetchResult:
        """`page` as a fetch returns it (a fetch that does not wait: one page)."""
        records, nxt, _ = self.page(segments, cursor, now, max_records, max_bytes, cancels)
        return _new_tuple(FetchResult, (records, nxt))  # (not its Python-level __new__)

    def wait_for_page(self, segments: SegmentSet, cursor: DeliveryKey | None,
                      max_records: int, max_bytes: int, cancels: CancelStore, *,
                      deadline: float, now: Callable[[], int], signal: ActivitySignal,
                      check_open: Callable[[], None]) -> FetchResult:
        """A page, waiting while it is empty until time.monotonic() reaches `deadline`: on
        the log's `signal` (appends and close bump it, under the log's lock, which the
        caller holds except while asleep), and no later than the first record after the
        cursor comes due."""
        def page_once() -> tuple[FetchResult, bool]:
            check_open()
            page = self.fetch_page(segments, cursor, now(), max_records, max_bytes, cancels)
            return page, bool(page.records)

        def next_due_ms() -> int | None:
            # an empty page began a quiet spell: nothing after the cursor is due before it
            # ends (an append due sooner ends it sooner, and bumps the signal); set by the
            # page just taken, in the same hold of the log's lock
            gate = self.gate
            return gate.until - now() if gate.armed else None

        return long_poll(page_once, next_due_ms, signal, deadline)
