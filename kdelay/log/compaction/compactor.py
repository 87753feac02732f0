"""Delay-aware compaction: rewrite sealed segments without their removable records.

Retention deletes whole segments from the log start, so one record due in a month pins
every segment behind it for a month. Compaction reclaims that space while keeping offsets:

- A record is *removable* once it has been due for longer than `retention_ms` (its batch's
  deliverAfter < now - retention_ms: the rule retention applies to whole segments) or it
  is cancelled (asked through a `Cancelled` hook, so planning and rewriting know nothing
  of how cancellations are stored). removable.py holds the rule; both ask it.
- `plan` picks groups of adjacent sealed segments: each group holds at least one segment
  in which at least `min_ratio` of the bytes are removable, plus neighbours that are small
  after compaction, as long as the survivors fit in `segment_bytes`. A group is rewritten
  into one segment named by its first base offset (so the log start never moves).
- `rewriter.rewrite` writes each group's replacement once (whole batches copied byte for
  byte, partly cancelled ones re-encoded: see rewriter.py) under `.cleaned` names, fsync'd;
  swap.install then swaps it in (see swap.py for the protocol).
- `run` drives it on a live log: the log's lock is held only for a snapshot and, per
  group, for the swap's renames. A `Compactor` is one Log's driver: one run at a time,
  totals since open, and the rule that keeps cancellations made during a rewrite.

Offsets may then have gaps inside a compacted segment, which carries a marker file saying
so (swap.py). Memory: one group's index entries (bounded by `segment_bytes` of survivors,
and the sources' index columns, which are memory-mapped); I/O: one sequential read of the
sources, one sequential write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...config import LogConfig
from ...errors import CorruptLogError
from ...index.entry import E_BASE_OFFSET, E_DELIVER_AFTER, E_LAST_OFFSET_DELTA, E_SIZE
from ...records import CompactionResult
from ..cancellation.cancel_ops import settle_moves
from ..cancellation.cancel_store import CancelStore
from ..segments.segment import LogSegment
from . import swap
from .removable import (
    NO_HORIZON,
    NO_OFFSETS,
    Cancelled,
    cancelled_between,
    horizon,
    removable,
)
from .rewriter import BatchPlan, Rewritten, Source, batch_plan, rewrite

__all__ = ["BatchPlan", "Cancelled", "CompactionResult", "Compactor", "NO_HORIZON", "Rewritten",
           "Settings", "Source", "batch_plan", "horizon", "plan", "removable_bytes",
           "rewrite", "run"]

_log = logging.getLogger("kdelay")


def removable_bytes(src: Source, horizon_ms: int, cancelled: Cancelled | None) -> int:
    """What `batch_plan(...).removable_bytes` says, without sorting anything. With nothing
    cancelled the rule leaves only age, and the index is in deliverAfter order: the
    batches removable by age are a prefix (one search). O(log batches), or O(batches)
    with cancels."""
    cols = src.columns
    da, base, size = cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET], cols[E_SIZE]
    lod = cols[E_LAST_OFFSET_DELTA]
    k = int(np.searchsorted(da, horizon_ms, side="left"))  # da < horizon: removable
    gone = cancelled_between(cancelled, src.base_offset, src.end_offset) \
        if len(base) > k else NO_OFFSETS
    if not len(gone):
        return int(size[:k].astype(np.int64).sum())
    return int(removable(da, base.astype(np.int64), lod.astype(np.int64) + 1,
                         size.astype(np.int64), horizon_ms, gone).removable_bytes)


def plan(sources: list[Source], *, horizon_ms: int, min_ratio: float, segment_bytes: int,
         cancelled: Cancelled | None = None) -> list[list[Source]]:
    """Groups of adjacent sealed segments to rewrite (see the module docstring). A segment
    is dirty when at least `min_ratio` of its bytes (and at least one byte) are removable,
    small when its survivors take under a quarter of `segment_bytes`. A group is a run of
    dirty or small segments with at least one dirty one, whose survivors fit in
    `segment_bytes`. `min_ratio` <= 0 plans nothing. O(total index entries)."""
    if min_ratio <= 0:
        return []
    groups: list[list[Source]] = []
    group: list[Source] = []
    kept = 0
    dirty = False

    def close() -> None:
        if dirty and group:
            groups.append(list(group))

    for src in sources:
        removable = removable_bytes(src, horizon_ms, cancelled)
        survivors = src.size - removable
        is_dirty = removable > 0 and removable >= min_ratio * src.size
        small = survivors < segment_bytes // 4
        contiguous = not group or group[-1].end_offset == src.base_offset
        if (is_dirty or small) and contiguous and kept + survivors <= segment_bytes:
            group.append(src)
            kept += survivors
            dirty = dirty or is_dirty
            continue
        close()
        group, kept, dirty = [], 0, False
        if is_dirty or small:
            group, kept, dirty = [src], survivors, is_dirty
    close()
    return groups


# ---------------------------------------------------------------------------- the driver


@dataclass
class Settings:
    retention_ms: int
    min_ratio: float
    segment_bytes: int
    index_interval_bytes: int

    @classmethod
    def of(cls, config: LogConfig) -> Settings:
        return cls(config.retention_ms, config.compaction_min_ratio, config.segment_bytes,
                   config.index_interval_bytes)


def run(directory: str, segments, lock, settings: Settings, *, now: Callable[[], int],
        cancelled: Cancelled | None = None, before_change: Callable[[], None] = lambda: None,
        after_change: Callable[[], None] = lambda: None,
        is_closed: Callable[[], bool] = lambda: False,
        may_swap: Callable[[list[LogSegment], LogSegment], bool] = lambda olds, new: True,
        keep: Callable[[LogSegment], bool] = lambda seg: False,
        ) -> CompactionResult:
    """Compact a live log's sealed segments. `segments` is its SegmentSet and `lock` the
    lock guarding it: held only to take a snapshot of the sealed segments and, per group,
    for the swap (a few renames and two directory fsyncs); planning and rewriting read
    immutable sealed files through their own descriptors while appends and fetches go on.
    A group whose segments changed meanwhile (retention deleted one) is dropped, as is one
    whose source turns out damaged (logged; verify reports the damage), and one `may_swap`
    refuses (asked under the lock with the old segments and the rewritten one: state kept
    beside a segment, such as cancellations made during the rewrite, may not survive a
    merge; a later run plans afresh). Segments `keep` holds (asked under the lock: one in
    the object store, or being copied there) are never rewritten. Call with the caller's
    compaction lock held (one compaction at a time per log)."""
    with lock:
        if settings.min_ratio <= 0 or is_closed():
            total = sum(s.size for s in segments)
            return CompactionResult(0, total, total, active_segment_bytes=segments.active.size)
        hz = horizon(now(), settings.retention_ms)
        # a segment in the object store (or being copied there) is never rewritten: its copy
        # is its record
        live = {s.base_offset: s for s in segments
                if s is not segments.active and not keep(s)}
        sources = [Source.of(s) for s in live.values()]
        before = sum(s.size for s in segments)
    groups = plan(sources, horizon_ms=hz, min_ratio=settings.min_ratio,
                  segment_bytes=settings.segment_bytes, cancelled=cancelled)
    rewritten = read = written = 0
    longest = 0.0
    for group in groups:
        try:
            rw = rewrite(directory, group, horizon_ms=hz, cancelled=cancelled,
                         index_interval_bytes=settings.index_interval_bytes)
        except CorruptLogError as e:
            _log.warning("kdelay compaction: segment group at %d left as it is: %s",
                         group[0].base_offset, e)
            swap.discard_cleaned(directory, group[0].base_offset)
            continue
        with lock:
            held = time.perf_counter()
            current = [_current(segments, live, src) for src in group]
            olds = [o for o in current if o is not None]
            if (is_closed() or len(olds) < len(current) or any(keep(o) for o in olds)
                    or not may_swap(olds, rw.segment)):
                rw.segment.close()
                swap.discard_cleaned(directory, group[0].base_offset)
                continue
            before_change()
            try:
                others = swap.install(directory, rw.segment.base_offset, rw.replaced)
            except BaseException:
                rw.segment.close()
                raise
            segments.replace(olds, rw.segment)
            after_change()
            longest = max(longest, time.perf_counter() - held)
        # no reader can reach the old segments any more (they left the set under the lock,
        # and the fetch state that remembered them was reset): close them unlocked
        for old in olds:
            old.close()
        swap.remove_companions(directory, others)
        rewritten += len(olds)
        read += rw.bytes_before
        written += rw.segment.size
    with lock:
        after = sum(s.size for s in segments)
        active = segments.active.size
    return CompactionResult(rewritten, before, after, read, written, longest * 1000, active)


def _current(segments, live: dict[int, LogSegment], src: Source) -> LogSegment | None:
    """The segment object `src` was taken from, if it is still in the log unchanged (and
    was not copied to the object store meanwhile)."""
    seg = live.get(src.base_offset)
    if seg is None:
        return None
    try:
        still = segments[src.base_offset] is seg
    except KeyError:
        return None
    return seg if still and seg.size == src.size and seg.remote is None else None


class Compactor:
    """One Log's compaction: runs one at a time (`run` takes the log's lock only for its
    snapshot and swaps), keeps the totals since open that metrics report, and refuses a
    swap that would lose a cancellation recorded under a merged-away segment (one made
    during the rewrite: `run` asks may_swap under the lock)."""

    def __init__(self, directory: str, segments, lock: threading.RLock,
                 cancels: CancelStore):
        self._directory = directory
        self._segments = segments
        self._lock = lock
        self._cancels = cancels
        self._one_at_a_time = threading.Lock()
        self.totals: dict[str, float] = dict.fromkeys(
            ("runs", "segments_rewritten", "bytes_read", "bytes_written"), 0)
        self.totals.update(seconds=0.0, longest_swap_ms=0.0)

    def compact(self, config: LogConfig, *, now: Callable[[], int],
                cancelled: Cancelled | None, before_change: Callable[[], None],
                after_change: Callable[[], None], is_closed: Callable[[], bool],
                keep: Callable[[LogSegment], bool] = lambda seg: False) -> CompactionResult:
        """`run` with the Log's hooks (see there), then count it and forget cancellations
        that were compacted away."""
        with self._one_at_a_time:
            t = time.perf_counter()
            with self._lock:
                # removing a rescheduled original (cancelled, or due by age) makes its
                # cancellation durable: its copy must be durable first
                settle_moves(self._segments, self._cancels)
            result = run(self._directory, self._segments, self._lock, Settings.of(config),
                         now=now, cancelled=cancelled, before_change=before_change,
                         after_change=after_change, is_closed=is_closed,
                         may_swap=self._may_swap, keep=keep)
            totals = self.totals
            totals["runs"] += 1
            totals["seconds"] += time.perf_counter() - t
            for name in ("segments_rewritten", "bytes_read", "bytes_written"):
                totals[name] += getattr(result, name)
            totals["longest_swap_ms"] = max(totals["longest_swap_ms"], result.longest_swap_ms)
            if result.segments_rewritten:
                with self._lock:  # compacted away: no longer counted as cancelled
                    # prune leaves a segment with a pending move alone (one made during
                    # the run): one fsync settles them
                    settle_moves(self._segments, self._cancels)
                    self._cancels.prune(self._segments)
        return result

    def _may_swap(self, olds: list[LogSegment], merged: LogSegment) -> bool:
        return not self._cancels.would_strand([o.base_offset for o in olds[1:]], merged)
