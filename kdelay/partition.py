"""Log: one partition's directory of segments, the public facade over the storage engine.

The facade owns the lock, the log clock, the flush policy and the open/close protocol, and
delegates the rest: batch checks to kdelay.validation, the segments to kdelay.log
(SegmentSet, loader, retention, group positions), due-order and offset-order reads and
lag to kdelay.fetch.

Concurrency: one lock serialises appends, rolls, retention and each fetch's read of the
segment set; long-polling fetches wait on a condition outside it. The log clock never runs
backwards (it is the max of every clock reading it has seen), so an append always gets a
deliverAfter >= anything a fetch has already treated as "now": a late append can never land
behind a consumer's cursor.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

from . import fsio
from .clock import Clock, wall_clock
from .config import LogConfig
from .errors import (
    KdelayError,
    LogClosedError,
    OffsetOutOfRangeError,
    write_errors,
)
from .fetch import metrics, offset_order
from .fetch.due_order import DueOrderReader
from .log import groups, retention
from .log.batch_builder import build_batch
from .log.flushing import FlushPolicy
from .log.horizon import Horizon
from .log.loader import CLEAN_SHUTDOWN_FILE, LoadReport, open_directory, write_recovery_point
from .log.segment import LogSegment
from .log.segment_set import SegmentSet
from .records import AppendResult, DeliveryKey, FetchedRecord, FetchResult, Record
from .validation import (
    as_delivery_key,
    check_page_limits,
    is_int,
    is_positive_int,
    record_columns,
    requested_deliver_after,
)

__all__ = ["Clock", "Log", "OffsetOutOfRangeError"]

AppendListener = Callable[[AppendResult], None]


class Log:
    """One partition. Open with `Log.open(path, config=..., clock=...)`."""

    def __init__(self, path: str, config: LogConfig, clock: Clock, lock_fd: int,
                 segments: list[LogSegment], report: LoadReport):
        self.path = path
        self.config = config
        self.load_report = report
        self._clock = clock
        self._lock_fd = lock_fd
        self._lock = threading.RLock()
        self._appended = threading.Condition(self._lock)
        self._closed = False
        self._marker_present = False  # see _mark_dirty
        self._now_floor = 0
        self._horizon: Horizon | None = None  # set by open; see append
        self._segments = SegmentSet(path, segments)
        self._flush_policy = FlushPolicy(config)
        self._groups = groups.GroupStore(path)
        self._due_order = DueOrderReader()
        self._listeners: list[AppendListener] = []
        self._flusher: threading.Thread | None = None
        if config.flush_ms is not None:
            self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                             name=f"kdelay-flush-{path}")
            self._flusher.start()

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(cls, path: str | os.PathLike, config: LogConfig | None = None,
             clock: Clock | None = None) -> Log:
        """Open (creating if missing) and recover the log directory at `path`."""
        config = config if config is not None else LogConfig()
        if not isinstance(config, LogConfig):
            raise KdelayError(f"config must be a LogConfig, got {type(config).__name__}")
        path = os.fspath(path)
        opened = open_directory(path, config.index_interval_bytes)
        log = cls(path, config, clock or wall_clock, opened.lock_fd, opened.segments,
                  opened.report)
        log._marker_present = opened.marker_present
        # the log clock must not run backwards across a restart: the clean close stored
        # it, and commits record the clock they saw (which covers a crash)
        log._now_floor = max(opened.clock_floor, log._groups.max_clock())
        try:
            log._horizon = Horizon(path, log._now_floor)  # what lock-free readers may assume
        except BaseException:
            log.close()
            raise
        return log

    def _mark_dirty(self) -> None:
        """Before the first change to segments after a clean open: remove the clean-shutdown
        marker (durably), so that a crash from here on is recovered as one."""
        if self._marker_present:
            fsio.unlink(os.path.join(self.path, CLEAN_SHUTDOWN_FILE))
            fsio.fsync_dir(self.path)
            self._marker_present = False

    @write_errors
    def close(self) -> None:
        """Flush, persist the active segment's indexes, mark the shutdown clean."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if not self._marker_present:  # else nothing changed since the clean open
                    self._segments.active.persist_indexes()
                    write_recovery_point(self.path, self._segments.active.next_offset)
                fsio.atomic_write(os.path.join(self.path, CLEAN_SHUTDOWN_FILE),
                                  str(self._now_floor).encode("ascii"))
            finally:
                for seg in self._segments:
                    seg.close()
                if self._horizon is not None:
                    self._horizon.close()
                os.close(self._lock_fd)
                self._appended.notify_all()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call `listener(result)` after every successful append, outside the log's lock
        (a Topic uses it to wake consumers long-polling several partitions)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ clock

    def now(self) -> int:
        """The log clock: never below any time it has already handed out."""
        t = self._clock()
        with self._lock:
            if t > self._now_floor:
                self._now_floor = t
            return self._now_floor

    # ------------------------------------------------------------------ append

    @write_errors
    def append(self, records: Sequence[Record], *, deliver_after: int | None = None
               ) -> AppendResult:
        """Write one batch. Its deliverAfter is `deliver_after`, else the max of the records',
        and never below the append time. All of it is written, or nothing."""
        columns = record_columns(records)
        requested = requested_deliver_after(
            columns[4], deliver_after, path=self.path,
            delayed_delivery_enable=self.config.delayed_delivery_enable)
        cfg = self.config
        with self._lock:
            self._check_open()
            # tell lock-free readers an append is under way before the clock is read
            # (kdelay/log/horizon.py): its deliverAfter will be >= the floor published
            self._horizon.begin(self._now_floor)
            try:
                now = self.now()
                base = self._segments.active.next_offset
                batch = build_batch(columns, base_offset=base, now=now, requested=requested,
                                    explicit=deliver_after, config=cfg)
                self._mark_dirty()
                if self._segments.should_roll(len(batch.data), now, cfg.segment_bytes,
                                              cfg.segment_ms):
                    self._roll_locked()
                n = len(columns[0])
                self._segments.active.append(batch.data, base, n - 1, batch.deliver_after,
                                             batch.max_timestamp, cfg.index_interval_bytes)
            finally:
                self._horizon.end(self._now_floor)
            if self._flush_policy.appended(n):
                self._flush_locked()
            self._due_order.appended(batch.deliver_after)
            self._appended.notify_all()
            result = AppendResult(base, base + n - 1, batch.deliver_after, now)
        for listener in self._listeners:
            listener(result)
        return result

    # ------------------------------------------------------------------ roll / flush

    @write_errors
    def roll(self) -> None:
        """Seal the active segment (if it holds anything) and start a new one."""
        with self._lock:
            self._check_open()
            if self._segments.active.size:
                self._mark_dirty()
                self._roll_locked()

    def _roll_locked(self) -> None:
        self._segments.roll()
        self._flush_policy.flushed()

    @write_errors
    def flush(self) -> None:
        """fsync everything appended so far."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._segments.active.flush()
        self._flush_policy.flushed()

    def _flush_loop(self) -> None:
        period = self.config.flush_ms / 1000
        while True:
            time.sleep(period / 2)
            with self._lock:
                if self._closed:
                    return
                if self._flush_policy.overdue():
                    self._flush_locked()

    # ------------------------------------------------------------------ reading

    def fetch(self, after: DeliveryKey | int | None = None, *, max_records: int = 500,
              max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchResult:
        """Due records strictly after `after`, in (deliverAfter, offset) order."""
        check_page_limits(max_records, max_bytes, max_wait_ms)
        deadline = time.monotonic() + max_wait_ms / 1000
        with self._lock:
            cursor = self._resolve_cursor(after)
            while True:
                self._check_open()
                now = self.now()
                records, nxt, until = self._due_order.page(self._segments, cursor, now,
                                                           max_records, max_bytes)
                remaining = deadline - time.monotonic()
                if records or remaining <= 0:
                    return FetchResult(records, nxt)
                # Sleep until the first record after the cursor comes due, or an append
                # (which lowers `until` if it is due sooner) wakes us.
                self._appended.wait(min(remaining, max(0.001, (until - now) / 1000)))

    def _resolve_cursor(self, after: DeliveryKey | int | None) -> DeliveryKey | None:
        if after is None:
            return None
        key = as_delivery_key(after)
        if key is not None:
            return key
        if is_int(after):
            da = self._segments.deliver_after_of(after)
            if da is None:
                raise OffsetOutOfRangeError(
                    f"offset {after} is not in the log [{self.log_start_offset}, "
                    f"{self.log_end_offset})")
            return DeliveryKey(da, after)
        raise KdelayError(f"after must be None, an int offset or a DeliveryKey, got {after!r}")

    def read(self, offset: int, *, max_records: int = 500) -> list[FetchedRecord]:
        """Records in plain offset order from `offset` (due or not)."""
        if not is_int(offset) or offset < 0:
            raise KdelayError(f"offset must be a non-negative int, got {offset!r}")
        if not is_positive_int(max_records):
            raise KdelayError("max_records must be a positive int")
        with self._lock:
            self._check_open()
            return offset_order.read_from(self._segments, max(offset, self.log_start_offset),
                                          max_records)

    # ------------------------------------------------------------------ groups

    @write_errors
    def commit(self, group: str, key: DeliveryKey | None) -> None:
        """Durably store `group`'s position (the key of the last record it consumed)."""
        if key is not None:
            as_key = as_delivery_key(key)
            if as_key is None:
                raise KdelayError(f"commit needs a DeliveryKey, got {key!r}")
            key = as_key
        self._check_open()
        self._groups.commit(group, key, self.now())

    def committed(self, group: str) -> DeliveryKey | None:
        return self._groups.committed(group)

    # ------------------------------------------------------------------ retention

    @write_errors
    def enforce_retention(self) -> int:
        """Delete the oldest sealed segments whose every record has been due for longer than
        `retention_ms`, and, while the log is over `retention_bytes`, those whose every record
        is due. Returns how many segments were deleted."""
        with self._lock:
            self._check_open()
            return retention.enforce(self._segments, self.config, self.now(), self.path,
                                     self._mark_dirty)

    # ------------------------------------------------------------------ introspection

    @property
    def log_start_offset(self) -> int:
        return self._segments.oldest.base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments.active.next_offset

    @property
    def segments(self) -> list[int]:
        with self._lock:
            return self._segments.bases()

    @property
    def closed(self) -> bool:
        return self._closed

    def metrics(self) -> dict:
        """Counts and sizes for monitoring. `groups` maps each consumer group with a stored
        position to its committed key and its lag: records due now and after that key."""
        with self._lock:
            now = self.now()
            group_keys = {g: self._groups.committed(g) for g in self._groups.groups()}
            return metrics.collect(self._segments, group_keys, now, self.earliest_pending(now))

    def earliest_pending(self, now: int) -> int | None:
        """The smallest deliverAfter > `now` in the log (None: nothing pending). Sealed
        segments whose largest key is due are skipped without being touched."""
        with self._lock:
            segs = [*self._segments.sealed_not_all_due(now), self._segments.active]
            firsts = [f for f in (s.dly_index.first_after(now) for s in segs) if f is not None]
            return min(firsts, default=None)
