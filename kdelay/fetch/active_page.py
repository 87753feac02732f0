"""A page read from the active segment's recent entries alone: the small fetch's path.

A consumer at the head of the log (a scheduler loop: append, fetch what came due, and again)
reads records that are all in the active segment's in-memory entries, and no sealed segment
holds anything after its cursor. For such a page the general path (planner.py, due_merge.py)
plans the sealed segments, builds a run for the recent entries' merged order and another for
its unmerged arrivals, and merges their windows: fixed work in Python several times the cost
of the records it returns. Here one compiled call (active_fill.pyx) finds the due entries
after the cursor (recent_windows' due_entries_into: the two runs merged) and reads their
batches with the general fill's batch reader, by its rules, so the records, the checks of
each batch and the page's end are the general path's (tests/fetch/test_active_page.py holds
the two equal).

`active_page` returns None whenever the general path is needed: a sealed segment may hold a
record after the cursor, the active segment has persisted entries (after a clean reopen), a
page may need more due entries than the call looks at (MAX_ENTRIES), or a batch fails a
check (the general path then says what is wrong).
"""

from __future__ import annotations

from ..log.batch.record_decode import shared_headers
from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.segment_set import SegmentSet
from ..records import NO_HEADERS, DeliveryKey, FetchedRecord
from ..validation import MAX_INT64
from .active_fill import FILLED, NOTHING_AFTER, STOPPED, fill_active

NEVER = 1 << 63  # "until" when nothing after a cursor is pending at all
# the most due entries one call looks at (a page that needs more takes the general path)
MAX_ENTRIES = 4096
_new_tuple = tuple.__new__


def active_page(segments: SegmentSet, cursor: DeliveryKey | None, now: int, max_records: int,
                max_bytes: int, cancels: CancelStore | None
                ) -> tuple[list[FetchedRecord], DeliveryKey | None, int | None] | None:
    """(records, next cursor, until) of the page after `cursor`, as DueOrderReader.page's
    general path reads it, where nothing after the next cursor is due before `until` (the
    deliverAfter of the first entry after the page, NEVER if there is none; None when the
    page ended at a limit, so it is not known); None when that path is needed (see the
    module's doc). Cost: one compiled call, O(log entries + the page's entries + the
    unmerged arrivals that are due)."""
    if segments.sealed_hold_after(cursor):
        return None
    active = segments.active
    idx = active.dly_index
    if idx.chunks.n:  # persisted entries (a clean reopen): a column run too
        return None
    if cursor is None:
        after_da = after_off = -1
    else:
        after_da, after_off = cursor  # (checked: offset >= 0, validation.as_delivery_key)
    sc = None if cancels is None else cancels.get(active.base_offset)
    gone_a, gone_b = (None, None) if sc is None else sc.sorted_parts()
    out: list[FetchedRecord] = []
    outcome, detail = fill_active(
        out, idx.recent_columns, active.mapped(), active.size, after_da, after_off, now,
        min(max_records, MAX_INT64), min(max_bytes, MAX_INT64), MAX_ENTRIES, gone_a, gone_b,
        FetchedRecord, NO_HEADERS, shared_headers)
    if outcome != FILLED:
        return None
    until = None if detail == STOPPED else NEVER if detail == NOTHING_AFTER else detail
    if out:
        last = out[-1]
        return out, _new_tuple(DeliveryKey, (last.deliver_after, last.offset)), until
    return out, cursor, until
