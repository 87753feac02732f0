"""Maintenance: what runs beside one open log's appends and fetches: the flush_ms thread
(flush_policy.py), and what changes its segment set: retention (retention.py), compaction
(kdelay.log.compaction) and, with tiered storage, the object-store sync
(kdelay.log.tiered.sync). The Log facade's
`enforce_retention`, `compact` and `sync_remote` delegate here."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...config import LogConfig
from ...records import CompactionResult, RemoteSyncResult
from ..cancellation import cancel_ops
from ..cancellation.cancel_store import CancelStore
from ..compaction import compactor
from ..segments.segment import LogSegment
from ..segments.segment_set import SegmentSet
from . import retention
from .flush_policy import start_flusher
from .open_and_close import Lifetime
from .writer import Writer

if TYPE_CHECKING:  # tiered storage is imported by the logs that use it
    from ..tiered.sync import RemoteSync
    from ..tiered.tier import RemoteTier


def _never(seg: object) -> bool:
    return False


class Maintenance:
    """One open log's retention, compaction and remote sync. `now` is the log clock,
    `is_closed` the log's state, `after_change` what must forget the segment set's old
    shape (the fetch's remembered state) once a swap or a remote move changed it.
    `cancelled` is compaction's source of cancelled offsets (tests substitute their own
    to make compaction see cancellations the log does not hold)."""

    def __init__(self, path: str, config: LogConfig, segments: SegmentSet,
                 lock: threading.RLock, cancels: CancelStore, life: Lifetime, writer: Writer, *,
                 now: Callable[[], int], check_open: Callable[[], None],
                 is_closed: Callable[[], bool], after_change: Callable[[], None]):
        self._path = path
        self._config = config
        self._segments = segments
        self._lock = lock
        self._cancels = cancels
        self._life = life
        self._now = now
        self._check_open = check_open
        self._is_closed = is_closed
        self._after_change = after_change
        self.compactor = compactor.Compactor(path, segments, lock, cancels)
        # which offsets compaction may remove as cancelled: (first, end) -> sorted offsets
        self.cancelled: compactor.Cancelled = cancel_ops.settled_hook(lock, cancels)
        self.remote: RemoteSync | None = None  # tiered storage's background sync
        self._writer = writer
        self._flusher = None if config.flush_ms is None else start_flusher(
            self, Maintenance._flush_if_overdue, config.flush_ms / 1000,
            f"kdelay-flush-{path}")

    def _flush_if_overdue(self) -> bool:
        """The flush_ms thread's tick (flush_policy.start_flusher); False once closed."""
        with self._lock:
            if self._is_closed():
                return False
            if self._writer.policy.overdue():
                self._writer.flush()
            return True

    def start_remote_sync(self, tier: RemoteTier) -> None:
        """Tiered storage: start the background sync, woken by every roll."""
        from ..tiered.sync import RemoteSync

        self.remote = RemoteSync(tier, self._segments, self._lock, self._cancels,
                                 self._config, now=self._now,
                                 before_change=self._life.mark_dirty,
                                 after_change=self._after_change)
        self._writer.rolled = self.remote.wake
        self.remote.start()

    def stop(self) -> None:
        """Stop the remote sync's thread (its passes take the lock: call without it)."""
        if self.remote is not None:
            self.remote.stop()

    def enforce_retention(self) -> int:
        """Retention, then compaction when `compaction_min_ratio` > 0 and retention again
        for what compaction emptied at the log start (see Log.enforce_retention)."""
        self._check_open()
        deleted = self._retention_pass()
        if self._config.compaction_min_ratio > 0 and self.compact().segments_rewritten:
            deleted += self._retention_pass()
        return deleted

    def _retention_pass(self) -> int:
        self._check_open()  # first too: a forked child must not wait for the parent's lock
        with self._lock:
            self._check_open()
            remote = self.remote
            cancel_ops.settle_moves(self._segments, self._cancels)  # (see there)
            deleted = retention.enforce(self._segments, self._config, self._now(), self._path,
                                        self._life.mark_dirty,
                                        busy=remote.busy if remote else _never)
            self._cancels.forget_below(self._segments.oldest.base_offset)
        if deleted and remote is not None:
            remote.wake()  # to delete the remote copies retention gave up
        return deleted

    def sync_remote(self) -> RemoteSyncResult:
        """One remote sync pass now (see Log.sync_remote); nothing without tiered storage."""
        self._check_open()
        return RemoteSyncResult() if self.remote is None else self.remote.sync()

    def compact(self) -> CompactionResult:
        """One compaction run (see Log.compact)."""
        self._check_open()
        return self.compactor.compact(self._config, now=self._now, cancelled=self.cancelled,
                                      before_change=self._life.mark_dirty,
                                      after_change=self._after_change,
                                      is_closed=self._is_closed, keep=self._kept)

    def _kept(self, seg: LogSegment) -> bool:
        """Compaction rewrites only segments not in the object store nor being copied."""
        return seg.remote is not None or (self.remote is not None and self.remote.busy(seg))
