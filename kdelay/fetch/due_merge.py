"""Page filling: a k-way heap merge of runs (see runs.py) into one page of due records.

The merge pops the smallest head, so a page touches only the entries it returns plus one
head per run. Work is per batch: each batch is read and verified once, its records decoded
column-wise, and only the slice the page needs becomes FetchedRecords.
"""

from __future__ import annotations

import heapq
from itertools import repeat
from typing import NamedTuple

from ..log.batch import codec
from ..log.cancellation.cancel_store import CancelStore
from ..records import DeliveryKey, FetchedRecord
from .runs import BatchSource

_new_record = tuple.__new__


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


def _kept_records(h: codec.BatchHeader, data: bytes, skip: int, want: int, gone: list[int],
                  source: BatchSource, position: int) -> list[FetchedRecord]:
    """Up to `want` records of a verified batch from `skip` on, leaving out the cancelled
    offsets `gone` (sorted, inside the batch). Decodes only as far as the last record kept;
    O(1) Python work per cancelled record."""
    first = h.base_offset + skip
    stop = first + want  # one past the last offset needed
    drop = []
    for o in gone:
        if o >= stop:
            break
        drop.append(o - first)
        stop += 1
    stop = min(stop, h.last_offset + 1)
    kept = batch_records(h, data, skip, stop - first, source, position)
    for i in reversed(drop):
        del kept[i]
    return kept


def read_page(runs: list, after: DeliveryKey | None, now: int, max_records: int,
              max_bytes: int, cancels: CancelStore | None = None) -> Page:
    """Fill one page by merging `runs`: records with key > `after` and deliverAfter <= `now`,
    at most `max_records`, and `max_bytes` as a soft cap (at least one batch). Each run is
    left positioned at its first entry not fully consumed.

    Cancelled records (`cancels`) are left out and do not count against the page: a batch
    of a segment without cancellations costs one dict probe more; otherwise two binary
    searches find the batch's cancelled offsets, and a batch whose remaining records are all
    cancelled is not even read."""
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
        gone = None
        if skip <= lod and cancels is not None:
            sc = cancels.get(run.seg.base_offset)
            if sc is not None:
                n_gone = sc.count_in_range(base + skip, base + lod)
                if n_gone == lod + 1 - skip:
                    skip = lod + 1  # every record left in it is cancelled
                elif n_gone:
                    gone = sc.in_range(base + skip, base + lod)
        if skip <= lod:
            if out and taken_bytes + size > max_bytes:
                break
            h, data = run.seg.read_verified(run.head)
            want = max_records - len(out)
            if gone is None:
                out.extend(batch_records(h, data, skip, want, run.seg, pos))
                left = lod + 1 - skip
            else:
                out.extend(_kept_records(h, data, skip, want, gone, run.seg, pos))
                left = lod + 1 - skip - len(gone)
            taken_bytes += size
            if left > want:
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
