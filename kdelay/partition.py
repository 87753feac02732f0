"""Log: one partition's directory of segments, the public facade over the storage engine.

The facade owns the lock, the log clock, the wake-ups of waiting fetches and append
listeners, and the order of the open/close protocol; it delegates the rest: argument
checks to kdelay.validation; to kdelay.log the directory's lifetime (open_and_close.py), the
write path with its flush policy, cancel, reschedule and the append horizon for
lock-free readers (writer.pyx, cancel_ops.py, append_horizon.py), retention and compaction;
to kdelay.fetch due-order and offset-order reads, long polls, lag and metrics, and the
groups it owns: consumer-group positions (groups/positions.py) and queue groups
(groups/queue/, whose live state kdelay.clients.queue attaches through `_queue_groups`).

Concurrency: one lock serialises appends, rolls, retention and each fetch's read of the
segment set; long-polling fetches sleep on a signal outside it. The log clock never runs
backwards (log/local/log_clock.pyx: it is the max of every clock reading it has seen), so an
append always gets a deliverAfter >= anything a fetch has already treated as "now": a late
append can never land behind a consumer's cursor.

Lifetime: once closed, every call of the Log and of what is attached to it (its queue
groups, which close with it, and the clients) is refused with LogClosedError. A Log
belongs to the process that opened it: in a forked child it is closed for good
(kdelay.forks).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import forks
from .clock import Clock, wall_clock
from .config import LogConfig
from .errors import KdelayError, OffsetOutOfRangeError, raise_write_error, write_errors
from .fetch import metrics, offset_order
from .fetch.due_order import DueOrderReader, resolve_cursor
from .fetch.long_poll import ActivitySignal, due_in_ms
from .groups.positions import GroupStore, committed_positions
from .groups.queue.queue_groups import QueueGroups
from .log.batch.records_batch import RecordsBatch
from .log.cancellation import cancel_ops
from .log.compaction import compactor
from .log.local import retention
from .log.local.flush_policy import start_flusher
from .log.local.log_clock import LogClock
from .log.local.open_and_close import Lifetime, Opened, open_log_directory
from .log.local.writer import Writer
from .records import (
    AppendResult,
    CompactionResult,
    DeliveryKey,
    FetchedRecord,
    FetchResult,
    PackedBinary,
    Record,
    RemoteSyncResult,
)
from .validation import (
    BatchColumns,
    as_int,
    batch_columns,
    check_open_args,
    check_page_limits,
    commit_key,
    deliver_after_for_delay,
    offsets_arg,
    os_errors,
    record_columns,
    requested_deliver_after,
    reschedule_args,
)

if TYPE_CHECKING:  # tiered storage is imported by the logs that use it (Log.open)
    from .log.tiered.sync import RemoteSync
    from .log.tiered.tier import RemoteTier

__all__ = ["Clock", "Log", "OffsetOutOfRangeError"]

AppendListener = Callable[[AppendResult], None]
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot paths)


def _never(seg: object) -> bool:
    return False


class Log(forks.Owned):
    """One partition. Open with `Log.open(path, config=..., clock=...)`."""

    def __init__(self, path: str, config: LogConfig, clock: Clock, opened: Opened):
        self.path = path
        self.config = config
        self.load_report = opened.report
        self._clock = LogClock(clock)
        self._lock = threading.RLock()
        self._appended = ActivitySignal(self._lock)  # wakes long-polling fetches
        self._closed = False
        self._owner = forks.Ownership(self, f"log {path}")
        self._segments = opened.segments
        self._cancels = opened.cancels
        self._tier: RemoteTier | None = None  # tiered storage (set by open)
        self._life = Lifetime(self, path, opened)  # marker, clean close, descriptors
        self._writer = Writer(config, self._segments, self._cancels, self._life, self._clock)
        self._groups = GroupStore(path)
        self._queue_groups = QueueGroups(path, self.add_append_listener)
        self._due_order = DueOrderReader()
        self._compactor = compactor.Compactor(path, self._segments, self._lock, self._cancels)
        self._listeners: list[AppendListener] = []
        # which offsets are cancelled, for compaction: (first, end) -> sorted offsets
        # (None: none are); an attribute so that tests can substitute their own
        self._cancelled_offsets: compactor.Cancelled | None = cancel_ops.settled_hook(
            self._lock, self._cancels)
        self._flusher = None if config.flush_ms is None else start_flusher(
            self, Log._flush_if_overdue, config.flush_ms / 1000, f"kdelay-flush-{path}")
        self._remote: RemoteSync | None = None  # its background sync (_start_remote_sync)

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(cls, path: str | os.PathLike, config: LogConfig | None = None,
             clock: Clock | None = None) -> Log:
        """Open (creating if missing) and recover the log directory at `path`."""
        path, config = check_open_args(path, config, clock)
        tier = tiered = None
        if config.remote_storage is not None:
            # here, not at the top: a process without tiered storage never loads it
            from .log.tiered.opening import TieredDirectory
            from .log.tiered.tier import RemoteTier

            tier = RemoteTier(path, config)
            tiered = TieredDirectory(path, tier)
        opened = os_errors("opening", path, lambda: open_log_directory(
            path, config.index_interval_bytes, tiered))
        log = cls(path, config, clock or wall_clock, opened)
        log._tier = tier
        # the log clock must not run backwards across a restart: the clean close stored
        # it, and commits record the clock they saw (which covers a crash)
        try:
            log._clock.floor = max(opened.clock_floor, log._groups.max_clock())
            log._life.start_horizon(log._clock.floor)  # what lock-free readers may assume
            if tier is not None:
                log._start_remote_sync()
        except BaseException:
            log.close()
            raise
        return log

    def _start_remote_sync(self) -> None:
        """Tiered storage: start the background sync, woken by every roll."""
        from .log.tiered.sync import RemoteSync

        self._remote = RemoteSync(self._tier, self._segments, self._lock, self._cancels,
                                  self.config, now=self.now, before_change=self._life.mark_dirty,
                                  after_change=self._due_order.reset)
        self._writer.rolled = self._remote.wake
        self._remote.start()

    @write_errors
    def close(self) -> None:
        """Close the queue groups, flush, persist the active segment's indexes, mark the
        shutdown clean. Every later call, of the Log or of anything attached to it, is
        refused with LogClosedError. A second close does nothing; in a forked child, close
        is refused too (ForkedProcessError) and touches nothing."""
        with self._lock:
            if self._closed:
                self._owner.check_close_again()
                return
            self._closed = True
        try:
            if self._remote is not None:  # its passes take the lock: not held here
                self._remote.stop()
            # no queue group writes once close returns (a member of a closed group is
            # refused); outside the log's lock: a poll holds its group's lock while it
            # reads the log
            self._queue_groups.close()
        finally:
            with self._lock:
                try:
                    self._life.close_clean(self._clock.floor)
                finally:
                    self._life.release()
                    self._appended.bump_under_lock()

    def _orphaned(self) -> None:
        """In a forked child (kdelay.forks): closed for good, writing nothing. The locks
        are new ones: a thread of the parent may have held the old at the fork, and no
        thread here would ever release it (every method checks before it reads
        anything)."""
        self._closed = True
        self._lock = threading.RLock()
        self._appended = ActivitySignal(self._lock)
        self._queue_groups.orphaned()
        self._life.orphaned()

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call `listener(result)` after every successful append, outside the log's lock
        (a Topic uses it to wake consumers long-polling several partitions)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ clock

    def now(self) -> int:
        """The log clock: never below any time it has already handed out. A clock value
        that is not an int (or numpy integer) in [0, 2**63) raises KdelayError."""
        # not the log's lock, which an append holds (a Producer's send reads the clock)
        return self._clock.now()

    # ------------------------------------------------------------------ writing

    def append(self, records: Record | Sequence[Record], *, deliver_after: int | None = None,
               delay_ms: int | None = None) -> AppendResult:
        """Write one batch (one Record, or a sequence of them). Its deliverAfter is
        `deliver_after` (or the log clock now plus `delay_ms`), else the max of the
        records', and never below the append time. All of it is written, or nothing."""
        try:  # (as @write_errors, without its wrapper's cost on every append)
            if delay_ms is not None:
                deliver_after = deliver_after_for_delay(deliver_after, delay_ms, self.now())
            if type(records) is Record:  # a batch of one
                records = (records,)
            plain = RecordsBatch.of(records, deliver_after, self.config.delayed_delivery_enable)
            if plain is not None:  # checked in one compiled pass (the common types)
                return self._append_requested(plain, plain.requested)
            return self._append(record_columns(records), deliver_after)
        except OSError as e:
            raise_write_error(e, "append", self.path)

    @write_errors
    def append_columns(self, values: Sequence[bytes | None] | PackedBinary, *,
                       keys: Sequence[bytes | None] | PackedBinary | None = None,
                       timestamps: Sequence[int | None] | np.ndarray | None = None,
                       deliver_after: int | None = None) -> AppendResult:
        """`append` of a batch given as columns (no headers): the same checks and result,
        without a Record per row (validation.batch_columns). Values and keys may be
        PackedBinary (and timestamps an int array): no Python work per row at all."""
        return self._append(batch_columns(values, keys, timestamps), deliver_after)

    def _append(self, columns: BatchColumns, deliver_after: int | None) -> AppendResult:
        return self._append_requested(columns, requested_deliver_after(
            columns.deliver_afters, deliver_after, path=self.path,
            delayed_delivery_enable=self.config.delayed_delivery_enable))

    def _append_requested(self, columns: BatchColumns | RecordsBatch, requested: int | None
                          ) -> AppendResult:
        with self._lock:
            self._check_open()
            result = self._appended_locked(self._writer.append(columns, requested))
        return self._tell(result)

    def _appended_locked(self, result: AppendResult) -> AppendResult:
        """Wake long-polling fetches that the batch is due before they would wake."""
        self._due_order.appended(result.deliver_after)
        self._appended.comes_due_under_lock(due_in_ms(result))
        return result

    def _tell(self, result: AppendResult) -> AppendResult:
        for listener in self._listeners:  # outside the lock
            listener(result)
        return result

    @write_errors
    def roll(self) -> None:
        """Seal the active segment (if it holds anything) and start a new one."""
        with self._lock:
            self._check_open()
            self._writer.roll()

    @write_errors
    def flush(self) -> None:
        """fsync everything appended so far."""
        with self._lock:
            self._check_open()
            self._writer.flush()

    def _flush_if_overdue(self) -> bool:
        """The flush thread's tick (flush_policy.start_flusher); False once closed."""
        with self._lock:
            if self._closed:
                return False
            if self._writer.policy.overdue():
                self._writer.flush()
            return True

    @write_errors
    def cancel(self, offsets: int | Iterable[int]) -> int:
        """Withdraw pending records by offset (an int or an iterable of ints); returns how
        many were cancelled now. Offsets already cancelled, already due, or not in the log
        are skipped. Durable per the flush policy (counted like appended records)."""
        wanted = offsets_arg(offsets)
        with self._lock:
            self._check_open()
            return self._writer.cancel(wanted)

    @write_errors
    def reschedule(self, offset: int, deliver_after: int | None = None, *,
                   delay_ms: int | None = None) -> AppendResult:
        """Move one pending record: cancel it and append a copy (same key, value, headers,
        timestamp) due at `deliver_after` (or the log clock now plus `delay_ms`),
        atomically across crashes (log/cancellation/journal.py). A record that is
        cancelled, due or not in the log raises KdelayError."""
        if delay_ms is not None:
            deliver_after = deliver_after_for_delay(deliver_after, delay_ms, self.now(),
                                                    error=KdelayError)
        off, due = reschedule_args(offset, deliver_after, path=self.path,
                                   delayed_delivery_enable=self.config.delayed_delivery_enable)
        with self._lock:
            self._check_open()
            result = self._appended_locked(self._writer.reschedule(off, due))
        return self._tell(result)

    # ------------------------------------------------------------------ reading

    def fetch(self, after: DeliveryKey | int | None = None, *, max_records: int = 500,
              max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchResult:
        """Due records strictly after `after`, in (deliverAfter, offset) order."""
        max_records, max_bytes, max_wait_ms = check_page_limits(max_records, max_bytes,
                                                                max_wait_ms)
        deadline = time.monotonic() + max_wait_ms / 1000 if max_wait_ms else 0.0
        with self._lock:
            self._check_open()
            if not max_wait_ms:  # not a long poll
                now = self._clock.now()
                quiet = self._due_order.known_quiet(after, now)
                if quiet is not False:  # nothing due: the idle poll's cost is this much
                    return _new_tuple(FetchResult, ([], quiet))
                return self._due_order.fetch_page(self._segments,
                                                  resolve_cursor(self._segments, after), now,
                                                  max_records, max_bytes, self._cancels)
            cursor = resolve_cursor(self._segments, after)
            return self._due_order.wait_for_page(
                self._segments, cursor, max_records, max_bytes, self._cancels,
                deadline=deadline, now=self.now, signal=self._appended,
                check_open=self._check_open)

    def read(self, offset: int, *, max_records: int = 500) -> list[FetchedRecord]:
        """Records in plain offset order from `offset` (due or not)."""
        offset = as_int(offset, "offset")
        max_records = check_page_limits(max_records)[0]
        with self._lock:
            self._check_open()
            return offset_order.read_from(self._segments, max(offset, self.log_start_offset),
                                          max_records)

    # ------------------------------------------------------------------ groups

    @write_errors
    def commit(self, group: str, key: DeliveryKey | None, *,
               generation: int | None = None) -> None:
        """Durably store `group`'s position (the key of the last record it consumed). With
        `generation` (from `_join_group`), refused with GroupFencedError once a newer member
        has joined."""
        key = commit_key(key)
        self._check_open()
        self._groups.commit(group, key, self.now(), generation)

    def committed(self, group: str) -> DeliveryKey | None:
        self._check_open()
        return self._groups.committed(group)

    # the clients' plumbing (kdelay.clients): private, not a user's surface

    def _join_group(self, group: str) -> int:
        """Register a new member (Consumer) of `group` on this Log and return its
        generation; every older member is fenced (see `_check_member`)."""
        self._check_open()
        return self._groups.join(group)

    def _check_member(self, group: str, generation: int) -> None:
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
            remote = self._remote
            deleted = retention.enforce(self._segments, self.config, self.now(), self.path,
                                        self._life.mark_dirty,
                                        busy=remote.busy if remote else _never)
            self._cancels.forget_below(self.log_start_offset)
        if deleted and remote is not None:
            remote.wake()  # to delete the remote copies retention gave up
        return deleted

    @write_errors
    def sync_remote(self) -> RemoteSyncResult:
        """Tiered storage: do now what the background sync would (finish deleting remote
        copies retention gave up, copy every sealed segment not copied yet, apply local
        retention, remove orphans) and return what it did. Raises RemoteStorageError if the
        store fails (appends and reads of local segments go on; a later pass retries).
        Without `remote_storage`, does nothing."""
        self._check_open()
        if self._remote is None:
            return RemoteSyncResult()
        return self._remote.sync()

    @write_errors
    def compact(self) -> CompactionResult:
        """Rewrite sealed segments in which at least `compaction_min_ratio` of the bytes are
        removable (due for longer than `retention_ms`, or cancelled) without those records,
        keeping every other record with its offset (see kdelay.log.compaction.compactor). Appends and
        fetches go on meanwhile: the log's lock is held only to swap each rewritten segment
        in. Cost: one sequential read of the rewritten segments and one write of what
        survives; memory O(one segment's index)."""
        self._check_open()
        return self._compactor.compact(self.config, now=self.now,
                                       cancelled=self._cancelled_offsets,
                                       before_change=self._life.mark_dirty,
                                       after_change=self._due_order.reset,
                                       is_closed=lambda: self._closed,
                                       keep=self._kept_from_compaction)

    def _kept_from_compaction(self, seg) -> bool:
        """compact() rewrites only segments not in the object store nor being copied."""
        return seg.remote is not None or (self._remote is not None and self._remote.busy(seg))

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

    def metrics(self) -> dict:
        """Counts and sizes for monitoring. `groups` maps each consumer group with a stored
        position to its committed key and its lag: records due now and after that key;
        `queues` each queue group to its counts (queue_groups.group_counts)."""
        self._check_open()
        with self._lock:
            now = self.now()
            keys, unreadable = committed_positions(self._groups)
            out = metrics.log_metrics(self._segments, keys, unreadable, self._cancels,
                                      self._compactor.totals, now)
            if self._tier is not None:
                out["remote"] = metrics.remote_metrics(self._segments, self._tier)
        # outside the lock, as a live queue group's counts take the group's lock
        out["queues"] = self._queue_groups.counts(now, lambda key: self._due_after([key], now)[0])
        return out

    def _due_after(self, keys: Sequence[DeliveryKey | None], now: int) -> list[int]:
        """Per key (a position in due order, None: the start), the records due at `now`
        after it and not cancelled: what a reader at that position has left to read now."""
        with self._lock:
            return metrics.due_after_keys(self._segments, keys, now, self._cancels)

    def _earliest_pending(self, now: int) -> int | None:
        """The smallest deliverAfter > `now` in the log (None: nothing pending). Sealed
        segments whose largest key is due are skipped without being touched."""
        with self._lock:
            return metrics.earliest_pending(self._segments, now)
