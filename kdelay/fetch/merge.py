"""The due-order read: a k-way heap merge of per-segment DeliverAfterIndex runs.

Each segment contributes its index entries after the cursor, already in (deliverAfter,
offset) order; `heapq.merge` interleaves them lazily, so a page touches only the entries it
returns plus one per segment. Work is per batch: each batch is read and verified once, its
records decoded column-wise, and only the slice the page needs becomes FetchedRecords.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import NamedTuple, Protocol

from ..errors import CorruptLogError
from ..index.deliver_after_index import Entry
from ..log import codec
from ..records import DeliveryKey, FetchedRecord


class BatchSource(Protocol):
    """What the merge needs of a segment."""

    log_path: str

    def read_batch(self, position: int, size: int, expected_base: int) -> bytes: ...


class Page(NamedTuple):
    records: list[FetchedRecord]
    next: DeliveryKey | None
    next_pending: int | None  # deliverAfter of the first entry not yet due (None: none seen)


def merge_streams(streams: list[tuple[Iterator[Entry], BatchSource]]
                  ) -> Iterator[tuple[Entry, BatchSource]]:
    """One key-ordered stream of (entry, segment) out of per-segment entry streams."""
    tagged = [zip(entries, repeat(seg)) for entries, seg in streams]
    if len(tagged) == 1:
        return tagged[0]
    return heapq.merge(*tagged)


def batch_records(data: bytes, deliver_after: int, skip: int, limit: int,
                  source: BatchSource, position: int) -> list[FetchedRecord]:
    """Records `skip` .. `skip + limit` of a verified batch as FetchedRecords."""
    h = codec.parse_header(data)
    cols = codec.decode_records(data, h, path=source.log_path, file_pos=position)
    stop = min(h.record_count, skip + limit)
    if skip == 0 and stop == h.record_count:
        ts, keys, values, headers = cols
    else:
        ts, keys, values, headers = (c[skip:stop] for c in cols)
    offsets = range(h.base_offset + skip, h.base_offset + stop)
    return list(map(FetchedRecord._make,
                    zip(offsets, repeat(deliver_after), ts, keys, values, headers,
                        repeat(None))))


def read_page(stream: Iterable[tuple[Entry, BatchSource]], after: DeliveryKey | None,
              now: int, max_records: int, max_bytes: int) -> Page:
    """Fill one page from a merged stream: records with key > `after` and deliverAfter <=
    `now`, at most `max_records`, and `max_bytes` as a soft cap (at least one batch)."""
    out: list[FetchedRecord] = []
    taken_bytes = 0
    next_pending = None
    for (da, base, pos, lod, size), seg in stream:
        if da > now:
            next_pending = da
            break
        skip = 0
        if after is not None and da == after.deliver_after and base <= after.offset:
            skip = after.offset - base + 1
            if skip > lod:
                continue  # the cursor's batch is fully consumed
        if out and taken_bytes + size > max_bytes:
            break
        data = seg.read_batch(pos, size, base)
        if data[codec.DELIVER_AFTER_OFFSET - 0:codec.DELIVER_AFTER_OFFSET + 8] != \
                da.to_bytes(8, "big", signed=True):
            raise CorruptLogError(f"batch deliverAfter disagrees with its index entry ({da})",
                                  seg.log_path, pos)
        out.extend(batch_records(data, da, skip, max_records - len(out), seg, pos))
        taken_bytes += size
        if len(out) >= max_records:
            break
    nxt = DeliveryKey(out[-1].deliver_after, out[-1].offset) if out else after
    return Page(out, nxt, next_pending)
