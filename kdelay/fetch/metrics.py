"""The numbers `Log.metrics` reports, assembled from a SegmentSet, its group positions,
its cancellations and its compaction totals (its queue groups count themselves:
kdelay.groups.queue.queue_groups)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import RemoteStorageError
from ..index.entry import E_BASE_OFFSET, E_DELIVER_AFTER, E_LAST_OFFSET_DELTA
from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.layout import DLYINDEX_SUFFIX, INDEX_SUFFIXES
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..log.tiered.placement import placement_counts
from ..records import DeliveryKey
from .lag import due_after

if TYPE_CHECKING:
    from ..log.tiered.tier import RemoteTier


class Reach:
    """Which segments a metrics call counts. Every local segment; a remote one whose dly
    index is at hand, or is fetched while the store answers: metrics never raise for an
    unreachable store. After the first failed fetch of a call no other uncached segment is
    tried (a store that times out would cost that much per segment); those are left out
    of the counts and counted in `uncounted` (`metrics()["remote"]["segments_uncounted"]`),
    the failure is the tier's `last_error`."""

    def __init__(self) -> None:
        self.failed = False
        self.uncounted: set[int] = set()

    def dly_index(self, seg):
        """The segment's DeliverAfterIndex, or None if it cannot be reached now."""
        if isinstance(seg, LogSegment):
            return seg.dly_index
        if not self.failed or seg.has_index(DLYINDEX_SUFFIX):
            try:
                return seg.dly_index
            except RemoteStorageError:  # (the segment recorded it as the tier's last error)
                self.failed = True
        self.uncounted.add(seg.base_offset)
        return None


def log_metrics(segments: SegmentSet, group_keys: dict[str, DeliveryKey | None],
                unreadable: dict[str, str], cancels: CancelStore, compaction_totals: dict,
                now: int, reach: Reach | None = None) -> dict:
    """Everything `Log.metrics` reports but the queue groups (call with the log's lock
    held), from each consumer group's committed key (kdelay.groups.positions). A group
    whose position file cannot be read (`unreadable`: its error) reports its error instead
    of failing the whole call; segments out of `reach` (a remote store down) are left out
    of the counts."""
    reach = reach or Reach()
    out = collect(segments, group_keys, now, earliest_pending(segments, now, reach), cancels,
                  reach)
    for g, error in unreadable.items():
        out["groups"][g] = {"committed": None, "lag": None, "error": error}
    out["compaction"] = dict(compaction_totals)  # totals since open
    out["cancelled_records"] = cancels.total()
    return out


def earliest_pending(segments: SegmentSet, now: int, reach: Reach | None = None
                     ) -> int | None:
    """The smallest deliverAfter > `now` (None: nothing pending) among the segments in
    `reach` (all: None). Sealed segments whose largest key is due are skipped without
    being touched."""
    segs = [*segments.sealed_not_all_due(now), segments.active]
    indexes = [s.dly_index for s in segs] if reach is None else [reach.dly_index(s)
                                                                 for s in segs]
    firsts = [f for f in (i.first_after(now) for i in indexes if i is not None)
              if f is not None]
    return min(firsts, default=None)


def collect(segments: SegmentSet, group_keys: dict[str, DeliveryKey | None], now: int,
            earliest_pending: int | None, cancels: CancelStore, reach: Reach | None = None
            ) -> dict:
    """Counts, sizes and per-group lag over every segment in `reach` (all: None; sizes
    over every segment) (see Log.metrics); the lag leaves cancelled records out (a group
    never gets them). O(segments + batches due + cancelled records)."""
    reach = reach or Reach()
    pending = pending_batches = index_mem = index_disk = records = size = 0
    groups = list(group_keys)
    keys = [group_keys[g] for g in groups]
    lag = due_after_keys(segments, keys, now, cancels, reach) if groups else []
    for seg in segments:
        size += seg.size
        # a remote segment's indexes count only once fetched (never fetched for this)
        for idx in ((seg.dly_index, seg.offset_index, seg.time_index)
                    if isinstance(seg, LogSegment) else seg.loaded_indexes()):
            index_mem += idx.memory_bytes()
        dly = reach.dly_index(seg)
        if dly is None:
            continue
        p, pb = dly.count_pending(now)
        pending += p
        pending_batches += pb
        if seg.compacted:  # offsets have gaps: count what the batches hold
            records += int((dly.columns()[E_LAST_OFFSET_DELTA].astype("int64") + 1).sum())
        else:
            records += seg.next_offset - seg.base_offset
        for suffix in INDEX_SUFFIXES:
            # what the files really take (header included); the active segment's indexes
            # live in memory until it rolls or the log closes cleanly
            with contextlib.suppress(FileNotFoundError):
                index_disk += os.stat(seg.path(suffix)).st_size
    return {
        "log_start_offset": segments.oldest.base_offset,
        "log_end_offset": segments.active.next_offset,
        "segments": len(segments),
        "records": records,
        "bytes": size,
        "pending_records": pending,
        "pending_batches": pending_batches,
        "due_records": records - pending,
        "earliest_pending_deliver_after": earliest_pending,
        "index_bytes_in_memory": index_mem,
        "index_bytes_on_disk": index_disk,
        "groups": {g: {"committed": k, "lag": n} for g, k, n in zip(groups, keys, lag,
                                                                      strict=True)},
        "now": now,
    }


def remote_metrics(segments: SegmentSet, tier: RemoteTier, reach: Reach | None = None
                   ) -> dict:
    """`metrics()["remote"]`: where the segments are (placement.py, as `kdelay stats`
    counts them), the store's requests and bytes since open, its last error, and how many
    remote segments the counts left out (`reach`: the store could not be reached)."""
    return {
        **placement_counts([(s.size if isinstance(s, LogSegment) else None, s.remote)
                            for s in segments]),
        "requests": tier.counters.requests,
        "bytes_fetched": tier.counters.bytes_fetched,
        "last_error": tier.last_error,
        "segments_uncounted": 0 if reach is None else len(reach.uncounted),
    }


def due_after_keys(segments: SegmentSet, keys: Sequence[DeliveryKey | None], now: int,
                   cancels: CancelStore, reach: Reach | None = None) -> list[int]:
    """For each key, the records due at `now` after it and not cancelled, over every
    segment in `reach` (all: None): what a queue group whose cursor is at that key has
    yet to acquire."""
    total = [0] * len(keys)
    for seg in segments:
        dly = seg.dly_index if reach is None else reach.dly_index(seg)
        if dly is None:
            continue
        cols = dly.columns()
        da, off, lod = cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET], cols[E_LAST_OFFSET_DELTA]
        gone = cancels.get(seg.base_offset)
        counts = due_after(da, off, lod, now, keys, None if gone is None else gone.offsets())
        for i, n in enumerate(counts):
            total[i] += n
    return total
