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
import weakref
from collections.abc import Callable, Iterable, Sequence

from . import fsio
from .clock import Clock, wall_clock
from .config import LogConfig
from .errors import (
    InvalidOffsetError,
    InvalidRecordError,
    KdelayError,
    LogClosedError,
    OffsetOutOfRangeError,
    write_errors,
)
from .fetch import metrics, offset_order
from .fetch.due_order import DueOrderReader
from .log import cancel_ops, compaction, groups, retention
from .log.batch_builder import build_batch
from .log.cancel_store import CancelStore
from .log.flushing import FlushPolicy
from .log.horizon import Horizon
from .log.loader import CLEAN_SHUTDOWN_FILE, LoadReport, open_directory, write_recovery_point
from .log.segment import LogSegment
from .log.segment_set import SegmentSet
from .records import (
    AppendResult,
    CompactionResult,
    DeliveryKey,
    FetchedRecord,
    FetchResult,
    Record,
)
from .validation import (
    MAX_INT64,
    as_delivery_key,
    as_int,
    as_offset,
    check_open_args,
    check_page_limits,
    clock_value,
    is_int,
    offsets_arg,
    os_errors,
    record_columns,
    requested_deliver_after,
)

__all__ = ["Clock", "Log", "OffsetOutOfRangeError"]

AppendListener = Callable[[AppendResult], None]

# Sections of `Log.metrics()` contributed by higher layers (kdelay.clients.queue adds
# "queues"): name -> fn(log, now), called after the log's lock is released.
METRICS_SECTIONS: dict[str, Callable[[Log, int], object]] = {}


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
        self._cancels = CancelStore(path)  # loaded by open()
        self._listeners: list[AppendListener] = []
        # one compaction at a time; it takes self._lock only for snapshots and swaps
        self._compaction_lock = threading.Lock()
        self._compaction_totals = dict.fromkeys(
            ("runs", "segments_rewritten", "bytes_read", "bytes_written"), 0)
        self._compaction_totals.update(seconds=0.0, longest_swap_ms=0.0)
        # which offsets are cancelled: (first, end) -> sorted offsets (None: none are; the
        # cancel feature installs its store's answer here)
        self.cancelled_offsets: compaction.Cancelled | None = None
        self._flusher: threading.Thread | None = None
        # A Log dropped without close() (garbage-collected) still releases its descriptors
        # and so the directory lock, as a crashed process would: a later open in this
        # process recovers the directory instead of failing with LogLockedError forever.
        # The finalizer holds no reference to the Log; close() detaches it.
        self._finalizer = weakref.finalize(self, _release, self._segments, lock_fd,
                                           self._cancels)
        if config.flush_ms is not None:
            # the thread holds only a weak reference, so it does not keep the Log alive
            self._flusher = threading.Thread(target=_flush_loop,
                                             args=(weakref.ref(self), config.flush_ms / 1000),
                                             daemon=True, name=f"kdelay-flush-{path}")
            self._flusher.start()

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(cls, path: str | os.PathLike, config: LogConfig | None = None,
             clock: Clock | None = None) -> Log:
        """Open (creating if missing) and recover the log directory at `path`."""
        path, config = check_open_args(path, config, clock)
        opened = os_errors("opening", path,
                           lambda: open_directory(path, config.index_interval_bytes))
        log = cls(path, config, clock or wall_clock, opened.lock_fd, opened.segments,
                  opened.report)
        log._marker_present = opened.marker_present
        try:
            # after a crash every journal is checked against the recovered segments' ends,
            # and reschedules in flight are settled against the log (cancel_store.py)
            log._cancels.load(
                [(s.base_offset, s.next_offset) for s in opened.segments],
                recovered=() if opened.report.clean else log._segments.bases(),
                copy_check=cancel_ops.copy_checker(log._segments))
        except BaseException:
            log._finalizer()  # closes every descriptor and releases the lock, once
            raise
        opened.report.problems.extend(log._cancels.problems)
        log.cancelled_offsets = _settled_hook(log._lock, log._cancels)
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
                self._cancels.checkpoint(everything=True)  # after the .log fsync above
                fsio.atomic_write(os.path.join(self.path, CLEAN_SHUTDOWN_FILE),
                                  str(self._now_floor).encode("ascii"))
            finally:
                self._finalizer.detach()
                if self._horizon is not None:
                    self._horizon.close()
                _release(self._segments, self._lock_fd, self._cancels)
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
        """The log clock: never below any time it has already handed out. A clock value
        that is not an int (or numpy integer) in [0, 2**63) raises KdelayError."""
        t = self._clock()
        if type(t) is not int or t < 0 or t > MAX_INT64:
            t = clock_value(t)
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
                if self._segments.should_roll(len(batch.data), batch.max_timestamp,
                                              cfg.segment_bytes, cfg.segment_ms):
                    self._roll_locked()
                n = len(columns[0])
                sync = self._flush_policy.due_after(n)
                self._segments.active.append(batch.data, base, n - 1, batch.deliver_after,
                                             batch.max_timestamp, cfg.index_interval_bytes,
                                             sync=sync)
            finally:
                self._horizon.end(self._now_floor)
            self._flush_policy.appended(n)
            if sync:
                self._flush_policy.flushed()
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
        if self._cancels.dirty():  # caches written before the recovery point moves on
            self._segments.active.flush()
            self._cancels.checkpoint(everything=True)
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
        self._cancels.log_synced()  # the copies of reschedules so far are durable
        self._cancels.sync()
        self._flush_policy.flushed()

    # ------------------------------------------------------------------ reading

    def fetch(self, after: DeliveryKey | int | None = None, *, max_records: int = 500,
              max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchResult:
        """Due records strictly after `after`, in (deliverAfter, offset) order."""
        max_records, max_bytes, max_wait_ms = check_page_limits(max_records, max_bytes,
                                                                max_wait_ms)
        deadline = time.monotonic() + max_wait_ms / 1000
        with self._lock:
            self._check_open()
            cursor = self._resolve_cursor(after)
            while True:
                self._check_open()
                now = self.now()
                records, nxt, until = self._due_order.page(self._segments, cursor, now,
                                                           max_records, max_bytes,
                                                           self._cancels)
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
            after = int(after)
            da = self._segments.deliver_after_of(after) if after >= 0 else None
            if da is None:
                raise OffsetOutOfRangeError(
                    f"offset {after} is not in the log [{self.log_start_offset}, "
                    f"{self.log_end_offset})")
            return DeliveryKey(da, after)
        raise KdelayError(f"after must be None, an int offset or a DeliveryKey, got {after!r}")

    def read(self, offset: int, *, max_records: int = 500) -> list[FetchedRecord]:
        """Records in plain offset order from `offset` (due or not)."""
        offset = as_int(offset, "offset")
        max_records = check_page_limits(max_records)[0]
        with self._lock:
            self._check_open()
            return offset_order.read_from(self._segments, max(offset, self.log_start_offset),
                                          max_records)

    # ------------------------------------------------------------------ cancel

    @write_errors
    def cancel(self, offsets: int | Iterable[int]) -> int:
        """Withdraw pending records by offset (an int or an iterable of ints); returns how
        many were cancelled now. Offsets already cancelled, already due, or not in the log
        are skipped. Durable per the flush policy (counted like appended records)."""
        wanted = offsets_arg(offsets)
        with self._lock:
            self._check_open()
            # a cancel only takes records due after the clock it reads: published like an
            # append's, so a lock-free reader never plans past a cancel not yet written
            self._horizon.begin(self._now_floor)
            try:
                n = cancel_ops.cancel(self._segments, self._cancels, wanted, self.now())
            finally:
                self._horizon.end(self._now_floor)
            if n and self._flush_policy.appended(n):
                self._flush_locked()
            if self._cancels.needs_checkpoint():
                self._segments.active.flush()
                self._cancels.checkpoint(everything=False)
            return n

    @write_errors
    def reschedule(self, offset: int, deliver_after: int) -> AppendResult:
        """Move one pending record: cancel it and append a copy (same key, value, headers,
        timestamp) due at `deliver_after`, atomically across crashes (cancellations.py).
        A record that is cancelled, due or not in the log raises KdelayError."""
        off, due = as_offset(offset), as_offset(deliver_after)
        if off is None or due is None:
            raise InvalidOffsetError(f"reschedule needs a non-negative int offset and "
                                     f"deliver_after, got {offset!r}, {deliver_after!r}")
        requested_deliver_after((None,), due, path=self.path,
                                delayed_delivery_enable=self.config.delayed_delivery_enable)
        cfg = self.config
        with self._lock:
            self._check_open()
            self._horizon.begin(self._now_floor)  # as an append (see append)
            try:
                now = self.now()
                copy = cancel_ops.reschedule_copy(self._segments, self._cancels, off, due, now,
                                                  max_delay_ms=cfg.max_delivery_delay_ms)
                if len(copy.batch) > cfg.max_batch_bytes:
                    raise InvalidRecordError(f"the copy ({len(copy.batch)} bytes) exceeds "
                                             f"max_batch_bytes ({cfg.max_batch_bytes})")
                self._mark_dirty()
                if self._segments.should_roll(len(copy.batch), now, cfg.segment_bytes,
                                              cfg.segment_ms):
                    self._roll_locked()
                self._cancels.begin_move(copy.source_base, off, copy.base_offset, copy.crc)
                try:
                    self._segments.active.append(copy.batch, copy.base_offset, 0,
                                                 copy.deliver_after, copy.max_timestamp,
                                                 cfg.index_interval_bytes)
                except BaseException:
                    self._cancels.abort_move(copy.source_base, off)
                    raise
                self._cancels.end_move(copy.source_base, off)
            finally:
                self._horizon.end(self._now_floor)
            if self._flush_policy.appended(1):
                self._flush_locked()
            self._due_order.appended(copy.deliver_after)
            self._appended.notify_all()
            result = AppendResult(copy.base_offset, copy.base_offset, copy.deliver_after, now)
        for listener in self._listeners:
            listener(result)
        return result

    # ------------------------------------------------------------------ groups

    @write_errors
    def commit(self, group: str, key: DeliveryKey | None, *,
               generation: int | None = None) -> None:
        """Durably store `group`'s position (the key of the last record it consumed). With
        `generation` (from `join_group`), refused with GroupFencedError once a newer member
        has joined."""
        if key is not None:
            as_key = as_delivery_key(key)
            if as_key is None:
                raise KdelayError(f"commit needs a DeliveryKey, got {key!r}")
            key = as_key
        self._check_open()
        self._groups.commit(group, key, self.now(), generation)

    def committed(self, group: str) -> DeliveryKey | None:
        return self._groups.committed(group)

    def join_group(self, group: str) -> int:
        """Register a new member (Consumer) of `group` on this Log and return its
        generation; every older member is fenced (see `check_member`)."""
        return self._groups.join(group)

    def check_member(self, group: str, generation: int) -> None:
        """Raise GroupFencedError if a member newer than `generation` joined `group`."""
        self._groups.check_member(group, generation)

    # ------------------------------------------------------------------ retention

    @write_errors
    def enforce_retention(self) -> int:
        """Delete the oldest sealed segments whose every record has been due for longer than
        `retention_ms`, and, while the log is over `retention_bytes`, those whose every record
        is due; then, when `compaction_min_ratio` > 0, compact (and delete what compaction
        emptied at the log start). Returns how many segments were deleted."""
        deleted = self._retention_pass()
        if self.config.compaction_min_ratio > 0 and self.compact().segments_rewritten:
            deleted += self._retention_pass()
        return deleted

    def _retention_pass(self) -> int:
        with self._lock:
            self._check_open()
            deleted = retention.enforce(self._segments, self.config, self.now(), self.path,
                                        self._mark_dirty)
            self._cancels.forget_below(self.log_start_offset)
            return deleted

    @write_errors
    def compact(self) -> CompactionResult:
        """Rewrite sealed segments in which at least `compaction_min_ratio` of the bytes are
        removable (due for longer than `retention_ms`, or cancelled) without those records,
        keeping every other record with its offset (see kdelay.log.compaction). Appends and
        fetches go on meanwhile: the log's lock is held only to swap each rewritten segment
        in. Cost: one sequential read of the rewritten segments and one write of what
        survives; memory O(one segment's index)."""
        self._check_open()
        cfg = self.config
        settings = compaction.Settings(cfg.retention_ms, cfg.compaction_min_ratio,
                                       cfg.segment_bytes, cfg.index_interval_bytes)
        with self._compaction_lock:
            t = time.perf_counter()
            result = compaction.run(self.path, self._segments, self._lock, settings,
                                    now=self.now, cancelled=self.cancelled_offsets,
                                    before_change=self._mark_dirty,
                                    after_change=self._due_order.reset,
                                    is_closed=lambda: self._closed,
                                    may_swap=self._may_swap)
            totals = self._compaction_totals
            totals["runs"] += 1
            totals["seconds"] += time.perf_counter() - t
            for name in ("segments_rewritten", "bytes_read", "bytes_written"):
                totals[name] += getattr(result, name)
            totals["longest_swap_ms"] = max(totals["longest_swap_ms"], result.longest_swap_ms)
            if result.segments_rewritten:
                with self._lock:  # compacted away: no longer counted as cancelled
                    self._cancels.prune(self._segments)
        return result

    def _may_swap(self, olds: list[LogSegment], merged: LogSegment) -> bool:
        """Compaction may swap `olds` for `merged` unless a cancellation recorded under a
        merged-away segment would be lost (called with the lock held)."""
        return not self._cancels.would_strand([o.base_offset for o in olds[1:]], merged)

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
            group_keys, unreadable = {}, {}
            for g in self._groups.groups():
                try:
                    group_keys[g] = self._groups.committed(g)
                except KdelayError as e:  # one damaged file: that group reports it
                    unreadable[g] = str(e)
            out = metrics.collect(self._segments, group_keys, now, self.earliest_pending(now))
            for g, error in unreadable.items():
                out["groups"][g] = {"committed": None, "lag": None, "error": error}
            out["compaction"] = dict(self._compaction_totals)  # totals since open
            out["cancelled_records"] = self._cancels.total()
        for name, section in METRICS_SECTIONS.items():
            out[name] = section(self, now)
        return out

    def due_after(self, keys: Sequence[DeliveryKey | None], now: int) -> list[int]:
        """Per key (a position in due order, None: the start), the records due at `now`
        after it: what a reader at that position has left to read now."""
        with self._lock:
            return metrics.due_after_keys(self._segments, keys, now)

    def earliest_pending(self, now: int) -> int | None:
        """The smallest deliverAfter > `now` in the log (None: nothing pending). Sealed
        segments whose largest key is due are skipped without being touched."""
        with self._lock:
            segs = [*self._segments.sealed_not_all_due(now), self._segments.active]
            firsts = [f for f in (s.dly_index.first_after(now) for s in segs) if f is not None]
            return min(firsts, default=None)


def _settled_hook(lock: threading.RLock, store: CancelStore) -> compaction.Cancelled:
    """Compaction's `cancelled` hook: the cancelled offsets in [first, end) it may remove
    (not the original of a reschedule whose copy is not yet durable: see cancel_store).
    Holds no reference to the Log, so a dropped Log is still freed at once."""

    def settled(first: int, end: int) -> list[int]:
        with lock:
            return store.settled_between(first, end)

    return settled


def _release(segments: SegmentSet, lock_fd: int, cancels: CancelStore | None = None) -> None:
    """Close every segment's descriptor, the cancellation journals' and the lock's (which
    releases the lock)."""
    if cancels is not None:
        cancels.close()
    for seg in segments:
        seg.close()
    os.close(lock_fd)


def _flush_loop(ref: weakref.ref, period: float) -> None:
    """The flush_ms thread: fsync once the oldest unflushed append is flush_ms old. Ends
    when its Log is closed or garbage-collected."""
    while True:
        time.sleep(period / 2)
        log = ref()
        if log is None:
            return
        with log._lock:
            if log._closed:
                return
            if log._flush_policy.overdue():
                log._flush_locked()
        del log
