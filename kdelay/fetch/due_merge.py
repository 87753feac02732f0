"""Page filling: a k-way merge of runs (see runs.py) into one page of due records.

The merge takes the smallest head of the runs, so a page touches only the entries it
returns plus the heads it compares. It runs compiled (page_fill.KWayMerge): each run
offers a window of its index entries as columns, and one call merges them with a binary
heap (O(log k) per batch for k runs), reads each batch it takes from the mapped segment,
checks it against its entry (entry_check's rule, and its CRC-32C), decodes it and builds
the FetchedRecords the page needs. Python's work is per page and per window it refills or
segment it takes up (planner.py keeps the merge from one page to the next); a batch that
fails a check is read again by the Python path (Segment.read_verified,
codec.decode_records) to say what is wrong, in one wording. A remote run's bytes are
fetched when the fill is about to read a batch not at hand (FETCH; runs.py), so a page
fetches nothing for the runs it takes nothing from.
"""

from __future__ import annotations

from itertools import repeat
from typing import NamedTuple

from ..errors import KdelayError
from ..log.batch import codec
from ..log.cancellation.cancel_store import CancelStore
from ..records import DeliveryKey, FetchedRecord
from ..validation import MAX_INT64
from .page_fill import DAMAGED, DONE, FETCH, NO_BOUND, PLAN, PageRequest, Window
from .planner import MergeCursor, cursor_key
from .runs import BatchSource

_new_record = tuple.__new__
# most entries of a recent run gathered into a window at once (a larger page refills)
RECENT_WINDOW = 4096


class Page(NamedTuple):
    records: list[FetchedRecord]
    next: DeliveryKey | None
    next_pending: int | None  # deliverAfter of the first entry not yet due (None: none seen)


def batch_records(h: codec.BatchHeader, data: bytes, skip: int, limit: int,
                  source: BatchSource, position: int) -> list[FetchedRecord]:
    """Records `skip` .. `skip + limit` of a verified batch as FetchedRecords."""
    cols = codec.decode_records(data, h, path=source.log_path, file_pos=position)
    stop = min(h.record_count, skip + limit)
    ts, keys, values, headers = cols
    if skip or stop < h.record_count:
        ts, keys, values = ts[skip:stop], keys[skip:stop], values[skip:stop]
        headers = headers[skip:stop]
    offsets = range(h.base_offset + skip, h.base_offset + stop)
    rows = zip(offsets, repeat(h.deliver_after), ts, keys, values, headers, repeat(None))
    return list(map(_new_record, repeat(FetchedRecord), rows))


def window_limit(max_records: int) -> int:
    """How many entries a page of `max_records` gathers of a recent run at once."""
    return min(max_records, RECENT_WINDOW)


def read_page(state: MergeCursor, after: DeliveryKey | None, now: int, max_records: int,
              max_bytes: int, cancels: CancelStore | None = None) -> Page:
    """Fill one page from the merge `state` (planner.merge_state for `after`): records
    with key > `after` and deliverAfter <= `now`, at most `max_records`, and `max_bytes`
    as a soft cap (at least one batch), taking up pending segments as they can
    contribute. The merge is left positioned at the first entry of each run not fully
    consumed. Cancelled records (`cancels`) are left out and do not count against the
    page; a batch whose remaining records are all cancelled is not even read."""
    out: list[FetchedRecord] = []
    max_records = min(max_records, MAX_INT64)
    limit = window_limit(max_records)
    after_da, after_off = (-1, -1) if after is None else after
    request = PageRequest(after_da, after_off, now, max_records, min(max_bytes, MAX_INT64))
    key = cursor_key(after)
    merge, pending = state.merge, state.pending
    while True:
        bound = pending.peek()
        if bound is not None:
            request.bound_da, request.bound_off = bound
        else:
            request.bound_da = NO_BOUND
        outcome = merge.fill(out, request)
        if outcome in (DONE, DAMAGED):
            break
        if outcome == PLAN:
            state.take_up(key, now, limit, cancels)
            continue
        slot = request.detail
        run = state.runs[slot]
        if outcome == FETCH:
            run.fetch(merge.head(slot), now)
        else:
            run.moved_to(merge.head(slot))
        state.set_window(slot, now, limit, cancels)
    if outcome == DAMAGED:
        slot = request.detail
        window = merge.window(slot)
        assert window is not None  # the fill reads only from a slot with a window
        _explain(state.runs[slot].seg, window, merge.head(slot))
    nxt = DeliveryKey(out[-1].deliver_after, out[-1].offset) if out else after
    pending_da = request.detail if outcome == DONE and request.detail >= 0 else None
    bound = pending.peek()
    if bound is not None and (pending_da is None or bound[0] < pending_da):
        pending_da = bound[0]  # a bound, never later than the segment's first due
    return Page(out, nxt, pending_da)


def _explain(seg: BatchSource, window: Window, i: int) -> None:
    """Raise the CorruptLogError the Python path raises for the batch of entry `i` of
    `window`, which the page fill refused."""
    entry = window.entry(i)
    h, data = seg.read_verified(entry)
    codec.decode_records(data, h, path=seg.log_path, file_pos=entry.position)
    raise KdelayError(f"the compiled page fill refused the batch at byte {entry.position} "
                      f"of {seg.log_path}, which the Python checks pass")  # a bug, never data
