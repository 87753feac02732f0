"""The write path of one open log: batches appended to the active segment under the flush
policy, rolls, fsyncs, cancellations and reschedules. The Log facade holds its lock around
every call and keeps the clock, the wake-ups of waiting fetches and the append listeners."""

from __future__ import annotations

from collections.abc import Iterable

from ..config import LogConfig
from ..records import AppendResult
from . import cancel_ops
from .batch_builder import build_batch
from .cancel_store import CancelStore
from .flushing import FlushPolicy
from .lifecycle import Lifetime
from .segment_set import SegmentSet


class Writer:
    def __init__(self, config: LogConfig, segments: SegmentSet, cancels: CancelStore,
                 life: Lifetime):
        self.config = config
        self._segments = segments
        self._cancels = cancels
        self._life = life
        self.policy = FlushPolicy(config)

    def append(self, columns: list[tuple], requested: int | None, explicit: int | None,
               now: int) -> AppendResult:
        """Encode the checked `columns` as one batch and append it; fsync'd first when the
        flush policy says the batch makes a flush due."""
        cfg = self.config
        base = self._segments.active.next_offset
        batch = build_batch(columns, base_offset=base, now=now, requested=requested,
                            explicit=explicit, config=cfg)
        self.make_room(len(batch.data), batch.max_timestamp)
        n = len(columns[0])
        sync = self.policy.due_after(n)
        self._segments.active.append(batch.data, base, n - 1, batch.deliver_after,
                                     batch.max_timestamp, cfg.index_interval_bytes, sync=sync)
        self.policy.appended(n)
        if sync:
            self.policy.flushed()
        return AppendResult(base, base + n - 1, batch.deliver_after, now)

    def reschedule(self, offset: int, deliver_after: int, now: int) -> AppendResult:
        """cancel_ops.reschedule, then the flush policy (the copy counts as one record)."""
        copy = cancel_ops.reschedule(self._segments, self._cancels, offset, deliver_after,
                                     now, self.config, self.make_room)
        if self.policy.appended(1):
            self.flush()
        return AppendResult(copy.base_offset, copy.base_offset, copy.deliver_after, now)

    def cancel(self, offsets: Iterable[int], now: int) -> int:
        return cancel_ops.cancel(self._segments, self._cancels, offsets, now, self.policy,
                                 self.flush)

    def make_room(self, size: int, max_timestamp: int) -> None:
        """Before writing a batch: the first change removes the clean marker; roll if due."""
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

    def flush(self) -> None:
        self._segments.active.flush()
        self._cancels.log_synced()  # the copies of reschedules so far are durable
        self._cancels.sync()
        self.policy.flushed()
