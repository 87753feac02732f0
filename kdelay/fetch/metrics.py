"""The numbers `Log.metrics` reports, assembled from a SegmentSet, its group positions,
its cancellations and its compaction totals (its queue groups count themselves:
kdelay.groups.queue.queue_groups)."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from ..log.cancellation.cancel_store import CancelStore
from ..log.segments.layout import INDEX_SUFFIXES
from ..log.segments.segment import LogSegment
from ..log.segments.segment_set import SegmentSet
from ..log.tiered.placement import placement_counts
from ..records import DeliveryKey
from .lag import due_after

if TYPE_CHECKING:
    from ..log.tiered.tier import RemoteTier


def log_metrics(segments: SegmentSet, group_keys: dict[str, DeliveryKey | None],
                unreadable: dict[str, str], cancels: CancelStore, compaction_totals: dict,
                now: int) -> dict:
    """Everything `Log.metrics` reports but the queue groups (call with the log's lock
    held), from each consumer group's committed key (kdelay.groups.positions). A group
    whose position file cannot be read (`unreadable`: its error) reports its error instead
    of failing the whole call."""
    out = collect(segments, group_keys, now, earliest_pending(segments, now), cancels)
    for g, error in unreadable.items():
        out["groups"][g] = {"committed": None, "lag": None, "error": error}
    out["compaction"] = dict(compaction_totals)  # totals since open
    out["cancelled_records"] = cancels.total()
    return out


def earliest_pending(segments: SegmentSet, now: int) -> int | None:
    """The smallest deliverAfter > `now` (None: nothing pending). Sealed segments whose
    largest key is due are skipped without being touched."""
    segs = [*segments.sealed_not_all_due(now), segments.active]
    firsts = [f for f in (s.dly_index.first_after(now) for s in segs) if f is not None]
    return min(firsts, default=None)


def collect(segments: SegmentSet, group_keys: dict[str, DeliveryKey | None], now: int,
            earliest_pending: int | None, cancels: CancelStore) -> dict:
    """Counts, sizes and per-group lag over every segment (see Log.metrics); the lag
    leaves cancelled records out (a group never gets them). O(segments + batches due +
    cancelled records)."""
    pending = pending_batches = index_mem = index_disk = records = size = 0
    groups = list(group_keys)
    keys = [group_keys[g] for g in groups]
    lag = due_after_keys(segments, keys, now, cancels) if groups else []
    for seg in segments:
        p, pb = seg.dly_index.count_pending(now)
        pending += p
        pending_batches += pb
        if seg.compacted:  # offsets have gaps: count what the batches hold
            records += int((seg.dly_index.columns()[3].astype("int64") + 1).sum())
        else:
            records += seg.next_offset - seg.base_offset
        size += seg.size
        for idx in (seg.dly_index, seg.offset_index, seg.time_index):
            index_mem += idx.memory_bytes()
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


def remote_metrics(segments: SegmentSet, tier: RemoteTier) -> dict:
    """`metrics()["remote"]`: where the segments are (placement.py, as `kdelay stats`
    counts them), the store's requests and bytes since open, and its last error."""
    return {
        **placement_counts([(s.size if isinstance(s, LogSegment) else None, s.remote)
                            for s in segments]),
        "requests": tier.counters.requests,
        "bytes_fetched": tier.counters.bytes_fetched,
        "last_error": tier.last_error,
    }


def due_after_keys(segments: SegmentSet, keys: list[DeliveryKey | None], now: int,
                   cancels: CancelStore) -> list[int]:
    """For each key, the records due at `now` after it and not cancelled, over every
    segment: what a queue group whose cursor is at that key has yet to acquire."""
    total = [0] * len(keys)
    for seg in segments:
        da, off, _, lod, _ = seg.dly_index.columns()
        gone = cancels.get(seg.base_offset)
        counts = due_after(da, off, lod, now, keys, None if gone is None else gone.offsets())
        for i, n in enumerate(counts):
            total[i] += n
    return total
