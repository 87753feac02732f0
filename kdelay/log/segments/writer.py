"""The write path of one open log: batches appended to the active segment under the flush
policy, rolls, fsyncs, cancellations and reschedules; appends, cancels and reschedules
are published on the append horizon (append_horizon.py). The Log facade holds its lock
around every call and keeps the clock, the wake-ups of waiting fetches and the append
listeners.

A write that reads the clock tells lock-free readers it is under way before it reads it:
each runs inside `horizon.writing(floor, clock)` with the log clock's floor (its
deliverAfter will be >= that), which publishes the clock it used when the write ends."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...config import LogConfig
from ...records import AppendResult
from ...validation import BatchColumns
from ..batch.builder import build_batch
from ..batch.records_batch import RecordsBatch
from ..cancellation import cancel_ops
from ..cancellation.cancel_store import CancelStore
from .flush_policy import FlushPolicy
from .open_and_close import Lifetime
from .segment_set import SegmentSet

_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (every append)


def _nothing() -> None:
    pass


class Writer:
    def __init__(self, config: LogConfig, segments: SegmentSet, cancels: CancelStore,
                 life: Lifetime):
        self.config = config
        self._segments = segments
        self._cancels = cancels
        self._life = life
        self.policy = FlushPolicy(config)
        self.rolled: Callable[[], None] = _nothing  # after every roll (wakes the remote sync)

    def append(self, columns: BatchColumns | RecordsBatch, requested: int | None,
               clock: Callable[[], int], floor: int) -> AppendResult:
        """Encode the checked `columns` as one batch (at `clock()`, the log clock, whose
        floor is `floor`) and append it; fsync'd first when the flush policy says the
        batch makes a flush due."""
        cfg = self.config
        horizon = self._life.horizon
        now = horizon.start(floor, clock)  # (as `with horizon.writing(...)`, on every append)
        try:
            base = self._segments.active.next_offset
            data, n, deliver_after, max_timestamp = build_batch(
                columns, base_offset=base, now=now, requested=requested, config=cfg)
            self.make_room(len(data), max_timestamp)
            sync = self.policy.flushes and self.policy.due_after(n)
            self._segments.active.append(data, base, n - 1, deliver_after, max_timestamp,
                                         cfg.index_interval_bytes, sync=sync)
        finally:
            horizon.end(now)
        self.policy.appended(n)
        if sync:
            self.policy.flushed()
        return _new_tuple(AppendResult, (base, base + n - 1, deliver_after, now))

    def reschedule(self, offset: int, deliver_after: int, clock: Callable[[], int],
                   floor: int) -> AppendResult:
        """cancel_ops.reschedule, then the flush policy (the copy counts as one record)."""
        with self._life.horizon.writing(floor, clock) as now:  # as an append
            copy = cancel_ops.reschedule(self._segments, self._cancels, offset, deliver_after,
                                         now, self.config, self.make_room)
        if self.policy.appended(1):
            self.flush()
        return AppendResult(copy.base_offset, copy.base_offset, copy.deliver_after, now)

    def cancel(self, offsets: Iterable[int], clock: Callable[[], int], floor: int) -> int:
        """cancel_ops.cancel; durable per the flush policy, counted like appended records. A
        journal grown past its threshold is checkpointed after the .log fsync (which the
        checkpoint's recovery point relies on)."""
        # a cancel only takes records due after the clock it reads: published like an
        # append's, so a lock-free reader never plans past a cancel not yet written
        with self._life.horizon.writing(floor, clock) as now:
            n = cancel_ops.cancel(self._segments, self._cancels, offsets, now)
        if n and self.policy.appended(n):
            self.flush()
        if self._cancels.needs_checkpoint():
            self._segments.active.flush()
            self._cancels.checkpoint(everything=False)
        return n

    def make_room(self, size: int, max_timestamp: int) -> None:
        """Before writing a batch: the first change removes the clean marker; roll if due."""
        if self._life.marker_present:
            self._life.mark_dirty()
        cfg = self.config
        if self._segments.should_roll(size, max_timestamp, cfg.segment_bytes, cfg.segment_ms):
            self._roll()

    def roll(self) -> None:
        """Seal the active segment if it holds anything."""
        if self._segments.active.size:
            self._life.mark_dirty()
            self._roll()

    def _roll(self) -> None:
        if self._cancels.dirty():  # caches written before the recovery point moves on
            self._segments.active.flush()
            self._cancels.checkpoint(everything=True)
        self._segments.roll()
        self.policy.flushed()
        self.rolled()

    def flush(self) -> None:
        self._segments.active.flush()
        self._cancels.log_synced()  # the copies of reschedules so far are durable
        self._cancels.sync()
        self.policy.flushed()
