"""Page filling: a k-way merge of runs (see runs.py) into one page of due records.

The merge takes the smallest head of the runs, so a page touches only the entries it
returns plus one head per run. It runs compiled (page_fill.pyx): each run offers a window
of its index entries as columns, and one call merges them, reads each batch it takes from
the mapped segment, checks it against its entry (entry_check's rule, and its CRC-32C),
decodes it and builds the FetchedRecords the page needs. Python's work is per page and per
run; a batch that fails a check is read again by the Python path (Segment.read_verified,
codec.decode_records) to say what is wrong, in one wording. A remote run's bytes are
fetched when the fill is about to read a batch not at hand (FETCH; runs.py), so a page
fetches nothing for the runs it takes nothing from.
"""

from __future__ import annotations

from itertools import repeat
from typing import NamedTuple

import numpy as np

from ..errors import KdelayError
from ..log.batch import codec
from ..log.batch.record_decode import shared_headers
from ..log.cancellation.cancel_store import CancelStore
from ..records import NO_HEADERS, DeliveryKey, FetchedRecord
from ..validation import MAX_INT64
from .page_fill import DAMAGED, DONE, FETCH, REFILL, fill_page
from .runs import BatchSource

_new_record = tuple.__new__
_NO_OFFSETS = np.empty(0, np.int64)
# most entries of a recent run gathered into a window at once (a larger page refills)
_RECENT_WINDOW = 4096


class Page(NamedTuple):
    records: list[FetchedRecord]
    next: DeliveryKey | None
    next_pending: int | None  # deliverAfter of the first entry not yet due (None: none seen)


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
              max_bytes: int, cancels: CancelStore | None = None) -> Page:
    """Fill one page by merging `runs`: records with key > `after` and deliverAfter <= `now`,
    at most `max_records`, and `max_bytes` as a soft cap (at least one batch). Each run is
    left positioned at its first entry not fully consumed.

    Cancelled records (`cancels`) are left out and do not count against the page; a batch
    whose remaining records are all cancelled is not even read."""
    out: list[FetchedRecord] = []
    max_records = min(max_records, MAX_INT64)
    limit = min(max_records, _RECENT_WINDOW)
    windows = [_window(run, now, limit, cancels) for run in runs]
    heads = np.array([w[1] for w in windows], np.int64)
    windows = [w[0] for w in windows]
    after_da, after_off = (-1, -1) if after is None else after
    taken = 0
    while True:
        outcome, taken, detail = fill_page(
            out, windows, heads, codec.HEADER_LAYOUT, after_da, after_off, now, max_records,
            min(max_bytes, MAX_INT64), taken, FetchedRecord, NO_HEADERS, shared_headers)
        if outcome != REFILL and outcome != FETCH:
            break
        run = runs[detail]
        if outcome == FETCH:
            run.fetch(int(heads[detail]), now)
        else:
            run.moved_to(int(heads[detail]))
        windows[detail], heads[detail] = _window(run, now, limit, cancels)
    if outcome == DAMAGED:
        _explain(runs[detail].seg, windows[detail], int(heads[detail]))
    for run, head in zip(runs, heads.tolist(), strict=True):
        run.moved_to(head)
    nxt = DeliveryKey(out[-1].deliver_after, out[-1].offset) if out else after
    return Page(out, nxt, detail if outcome == DONE and detail >= 0 else None)


def _window(run, now: int, limit: int, cancels: CancelStore | None) -> tuple[tuple, int]:
    """(the window fill_page takes of `run`, its first entry)."""
    seg = run.seg
    mapped = seg.mapped()  # before the window: its bytes are ready in this mapping
    cols, start, end, more, ready = run.window(now, limit)
    sc = None if cancels is None else cancels.get(seg.base_offset)
    gone = (_NO_OFFSETS, _NO_OFFSETS) if sc is None else sc.sorted_parts()
    return (mapped, seg.size, *cols, end, more, ready, *gone), start


def _explain(seg: BatchSource, window: tuple, i: int) -> None:
    """Raise the CorruptLogError the Python path raises for the batch of entry `i` of
    `window`, which the page fill refused."""
    entry = tuple(int(c[i]) for c in window[2:7])
    h, data = seg.read_verified(entry)
    codec.decode_records(data, h, path=seg.log_path, file_pos=entry[2])
    raise KdelayError(f"the compiled page fill refused the batch at byte {entry[2]} of "
                      f"{seg.log_path}, which the Python checks pass")  # a bug, never data
