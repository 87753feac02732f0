"""Log: one partition's directory of segments, the public facade over the storage engine.

The facade owns the lock, the log clock, the wake-ups of waiting fetches and append
listeners, and the order of the open/close protocol; it delegates the rest: argument checks
to kdelay.validation; the directory's lifetime, the write path and retention, compaction
and the remote sync to kdelay.log.local (open_and_close.py, writer.pyx, maintenance.py);
reads, long polls and metrics to kdelay.fetch; group state to kdelay.groups, which the
clients reach through `log.clients` (groups/client_access.py). Each public method's
docstring ends with its cost.

One lock serialises appends, rolls, retention and each fetch's read of the segment set;
long-polling fetches sleep on a signal outside it. The log clock never runs backwards
(log/local/log_clock.pyx), so an append always gets a deliverAfter >= anything a fetch has
already treated as "now". Once closed, every call of the Log and of what is attached to it
is refused with LogClosedError; in a forked child it is closed for good (kdelay.forks).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import forks, validation
from .clock import Clock, wall_clock
from .config import LogConfig
from .errors import KdelayError, OffsetOutOfRangeError, raise_write_error, write_errors
from .fetch import metrics, offset_order, time_lookup
from .fetch.append_notices import AppendListener, AppendNotices
from .fetch.batch_reads import BatchReads
from .fetch.due_order import DueOrderReader, resolve_cursor
from .fetch.long_poll import ActivitySignal
from .groups.client_access import ClientAccess
from .groups.positions import GroupStore, committed_positions
from .groups.queue.queue_groups import QueueGroups
from .log.batch.client_batch import ClientBatch
from .log.batch.columns import BatchColumns, batch_columns, record_columns
from .log.batch.records_batch import RecordsBatch
from .log.local.log_clock import LogClock
from .log.local.maintenance import Maintenance
from .log.local.open_and_close import Lifetime, Opened, open_with_tier
from .log.local.writer import Writer
from .records import (
    AppendResult,
    CompactionResult,
    DeliveryKey,
    FetchedRecord,
    FetchResult,
    OffsetAndTimestamp,
    PackedBinary,
    Record,
    RemoteSyncResult,
)

if TYPE_CHECKING:  # tiered storage is imported by the logs that use it (Log.open)
    from .log.local.loader import LoadReport
    from .log.tiered.sync import RemoteSync
    from .log.tiered.tier import RemoteTier

__all__ = ["Clock", "Log", "OffsetOutOfRangeError"]

_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot paths)


class Log(forks.Owned):
    """One partition. Open with `Log.open(path, config=..., clock=...)`."""

    def __init__(self, path: str, config: LogConfig, clock: Clock, opened: Opened):
        self.path = path
        self.config = config
        self._load_report = opened.report
        self._clock = LogClock(clock)
        self._lock = threading.RLock()
        self._closed = False
        self._owner = forks.Ownership(self, f"log {path}")
        self._segments = opened.segments
        self._cancels = opened.cancels
        self._tier: RemoteTier | None = None  # tiered storage (set by open)
        self._remote: RemoteSync | None = None  # its background sync (set by open)
        self._life = Lifetime(self, path, opened)  # marker, clean close, descriptors
        self._writer = Writer(config, self._segments, self._cancels, self._life, self._clock)
        self._groups = GroupStore(path)
        self._queue_groups = QueueGroups(path, self.add_append_listener)
        self._due_order = DueOrderReader()
        self._notices = AppendNotices(self._lock, self._due_order)
        me = weakref.proxy(self)  # what the parts call back holds no reference to the Log

        def check_open() -> None:
            me._check_open()

        self._maintenance = Maintenance(
            path, config, self._segments, self._lock, self._cancels, self._life, self._writer,
            now=self._clock.now, check_open=check_open, is_closed=lambda: me._closed,
            after_change=self._due_order.reset)
        self.clients = ClientAccess(check_open, self._lock, self._segments, self._cancels,
                                    self._groups, self._queue_groups)
        self.batches = BatchReads(check_open, self._lock, self._segments, self._cancels,
                                  self._clock.now)

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(cls, path: str | os.PathLike, config: LogConfig | None = None,
             clock: Clock | None = None) -> Log:
        """Open (creating if missing) and recover the log directory at `path`. Cost: after
        a clean close, the indexes' headers (no .log data); after a crash, a scan of the
        segments past the recovery point."""
        path, config = validation.check_open_args(path, config, clock)
        opened, tier = open_with_tier(path, config)
        log = cls(path, config, clock or wall_clock, opened)
        log._tier = tier
        # no running backwards across a restart: from the clean close's clock and commits'
        try:
            log._clock.floor = max(opened.clock_floor, log._groups.max_clock())
            log._life.start_horizon(log._clock.floor)  # what lock-free readers may assume
            if tier is not None:  # tiered storage: the background sync, woken by every roll
                log._remote = log._maintenance.start_remote_sync(tier)
                log._writer.rolled = log._remote.wake
        except BaseException:
            log.close()
            raise
        return log

    @property
    def load_report(self) -> LoadReport:
        """What opening found and did. A clean open defers the sealed segments' indexes to
        their first use (log/local/loader.py); reading this report first loads and checks
        every one still deferred, so that it names all the damage there is. Cost:
        O(segments) the first time, O(1) after."""
        with self._lock:
            if not self._closed:
                self._load_report.finish_deferred()
        return self._load_report

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
            self._maintenance.stop()  # its passes take the lock: not held here
            # no queue group writes once close returns; outside the log's lock, as a poll
            # holds its group's lock while it reads the log
            self._queue_groups.close()
        finally:
            with self._lock:
                try:
                    self._life.close_clean(self._clock.floor)
                finally:
                    self._life.release()
                    self._notices.signal.bump_under_lock()

    def _orphaned(self) -> None:
        """In a forked child (kdelay.forks): closed for good, writing nothing; new locks,
        as a thread of the parent may have held the old ones at the fork."""
        self._closed = True
        self._lock = threading.RLock()
        self._notices.signal = ActivitySignal(self._lock)
        self._queue_groups.orphaned()
        self._life.orphaned()

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call `listener(result)` after every successful append, outside the log's lock
        (a Topic uses it to wake consumers long-polling several partitions)."""
        self._notices.listeners.append(listener)

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
        records', and never below the append time. All of it is written, or nothing.
        Cost: O(records) checks and encoding in C, one `pwrite`, O(1) index upkeep (an
        fsync as the flush policy says)."""
        try:  # (as @write_errors, without its wrapper's cost on every append)
            if delay_ms is not None:
                deliver_after = validation.deliver_after_for_delay(deliver_after, delay_ms,
                                                                   self.now())
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
        without a Record per row (log/batch/columns.py). Values and keys may be
        PackedBinary (and timestamps an int array): no Python work per row at all. Cost: as
        `append`, with the checks done column-wise."""
        return self._append(batch_columns(values, keys, timestamps), deliver_after)

    @write_errors
    def append_client_batch(self, batch: ClientBatch, *, spread_ms: int = 0,
                            log_append_time: bool = False,
                            producer: tuple[int, int, int] = (-1, -1, -1)) -> AppendResult:
        """Store a Kafka client's batch (a checked ClientBatch: the broker's produce path)
        as runs of consecutive offsets, each due at the latest time its records asked
        for, no record more than `spread_ms` later than it asked (client_batch.pyx).
        `producer`: (id, epoch, first sequence) kept in the stored headers. The result's
        deliver_after is the earliest run's. All of it is written, or nothing. Cost: one
        C pass over the records, one write, index upkeep per stored batch."""
        with self._lock:
            self._check_open()
            result = self._notices.under_lock(self._writer.append_client_batch(
                batch, spread_ms, log_append_time, *producer))
        return self._notices.after(result)

    def _append(self, columns: BatchColumns, deliver_after: int | None) -> AppendResult:
        return self._append_requested(columns, validation.requested_deliver_after(
            columns.deliver_afters, deliver_after, path=self.path,
            delayed_delivery_enable=self.config.delayed_delivery_enable))

    def _append_requested(self, columns: BatchColumns | RecordsBatch,
                          requested: int | None) -> AppendResult:
        with self._lock:
            if self._closed:
                self._check_open()
            result = self._writer.append(columns, requested)
            self._notices.under_lock(result)
        if self._notices.listeners:
            self._notices.after(result)
        return result

    @write_errors
    def roll(self) -> None:
        """Seal the active segment (if it holds anything) and start a new one. Cost: an
        fsync and the active segment's three indexes written."""
        with self._lock:
            self._check_open()
            self._writer.roll()

    @write_errors
    def flush(self) -> None:
        """fsync everything appended so far. Cost: one fsync (and the journals')."""
        with self._lock:
            self._check_open()
            self._writer.flush()

    @write_errors
    def cancel(self, offsets: int | Iterable[int]) -> int:
        """Withdraw pending records by offset (an int or an iterable of ints); returns how
        many were cancelled now. Offsets already cancelled, already due, or not in the log
        are skipped. Durable per the flush policy (counted like appended records). Cost:
        O(offsets + batches spanned) and one journal append per segment touched."""
        wanted = validation.offsets_arg(offsets)
        with self._lock:
            self._check_open()
            return self._writer.cancel(wanted)

    @write_errors
    def reschedule(self, offset: int, deliver_after: int | None = None, *,
                   delay_ms: int | None = None) -> AppendResult:
        """Move one pending record: cancel it and append a copy (same key, value, headers,
        timestamp) due at `deliver_after` (or the log clock now plus `delay_ms`),
        atomically across crashes (log/cancellation/journal.py). A record that is
        cancelled, due or not in the log raises KdelayError. Cost: one batch found by
        offset and read, one append, two journal entries."""
        if delay_ms is not None:
            deliver_after = validation.deliver_after_for_delay(
                deliver_after, delay_ms, self.now(), error=KdelayError)
        off, due = validation.reschedule_args(
            offset, deliver_after, path=self.path,
            delayed_delivery_enable=self.config.delayed_delivery_enable)
        with self._lock:
            self._check_open()
            result = self._notices.under_lock(self._writer.reschedule(off, due))
        return self._notices.after(result)

    # ------------------------------------------------------------------ reading

    def fetch(self, after: DeliveryKey | int | None = None, *, max_records: int = 500,
              max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchResult:
        """Due records strictly after `after`, in (deliverAfter, offset) order. Cost: per
        page, the batches it returns (read, CRC-checked, decoded in C) plus its planning
        over the segments that can contribute (fetch/planner.py); O(1) when nothing is
        due."""
        max_records, max_bytes, max_wait_ms = validation.check_page_limits(
            max_records, max_bytes, max_wait_ms)
        deadline = time.monotonic() + max_wait_ms / 1000 if max_wait_ms else 0.0
        with self._lock:
            if self._closed:
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
                deadline=deadline, now=self.now, signal=self._notices.signal,
                check_open=self._check_open)

    def read(self, offset: int, *, max_records: int = 500) -> list[FetchedRecord]:
        """Records in plain offset order from `offset` (due or not). Cost: O(log segments)
        to find the segment, one short header walk from the offset index, then the batches
        returned."""
        offset = validation.as_int(offset, "offset")
        max_records = validation.check_page_limits(max_records)[0]
        with self._lock:
            self._check_open()
            return offset_order.read_from(self._segments, max(offset, self.log_start_offset),
                                          max_records)

    def offset_for_time(self, timestamp: int) -> OffsetAndTimestamp | None:
        """The first record, in offset order, whose timestamp is >= `timestamp`: its offset
        and timestamp (None: no record is that late), as Kafka's offsetsForTimes. Cost:
        O(log segments + log index entries), a header walk of about one index interval
        (timestamps growing with offsets), one batch decoded (fetch/time_lookup.py)."""
        timestamp = validation.as_int(timestamp, "timestamp")
        with self._lock:
            self._check_open()
            return time_lookup.offset_for_time(self._segments, timestamp)

    # ------------------------------------------------------------------ groups

    @write_errors
    def commit(self, group: str, key: DeliveryKey | None, *,
               generation: int | None = None) -> None:
        """Durably store `group`'s position (the key of the last record it consumed). With
        `generation` (from `clients.join_group`), refused with GroupFencedError once a
        newer member has joined. Cost: one small file replaced atomically (fsync'd)."""
        key = validation.commit_key(key)
        self._check_open()
        self._groups.commit(group, key, self.now(), generation)

    @write_errors
    def commit_many(self, positions: dict[str, DeliveryKey | None]) -> None:
        """Durably store several groups' positions at once (a broker's group commit).
        Cost: one fsync per group and one directory fsync for them all."""
        keys = {group: validation.commit_key(key) for group, key in positions.items()}
        self._check_open()
        self._groups.commit_many(keys, self.now())

    def committed(self, group: str) -> DeliveryKey | None:
        """`group`'s stored position (None: none). Cost: one small file read."""
        self._check_open()
        return self._groups.committed(group)

    # ------------------------------------------------------------------ maintenance

    @write_errors
    def enforce_retention(self) -> int:
        """Delete the oldest sealed segments whose every record has been due for longer than
        `retention_ms`, and, while the log is over `retention_bytes`, those whose every record
        is due; then, when `compaction_min_ratio` > 0, compact (and delete what compaction
        emptied at the log start). Returns how many segments were deleted. Cost: O(segments
        deleted), plus a compaction's."""
        self._check_open()
        return self._maintenance.enforce_retention()

    @write_errors
    def sync_remote(self) -> RemoteSyncResult:
        """Tiered storage: do now what the background sync would (finish deleting remote
        copies retention gave up, copy every sealed segment not copied yet, apply local
        retention, remove orphans) and return what it did. Raises RemoteStorageError if the
        store fails (appends and reads of local segments go on; a later pass retries).
        Without `remote_storage`, does nothing. Cost: one upload per segment copied."""
        self._check_open()
        return self._maintenance.sync_remote()

    @write_errors
    def compact(self) -> CompactionResult:
        """Rewrite sealed segments in which at least `compaction_min_ratio` of the bytes are
        removable (due for longer than `retention_ms`, or cancelled) without those records,
        keeping every other record with its offset (see kdelay.log.compaction.compactor).
        Appends and fetches go on meanwhile: the log's lock is held only to swap each
        rewritten segment in. Cost: one sequential read of the rewritten segments and one
        write of what survives; memory O(one segment's index)."""
        self._check_open()
        return self._maintenance.compact()

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
        `queues` each queue group to its counts (queue_groups.group_counts). Cost:
        O(segments + batches due) and one file read per consumer group."""
        self._check_open()
        reach = metrics.Reach()  # a store that is down is reported, never raised
        with self._lock:
            now = self.now()
            keys, unreadable = committed_positions(self._groups)
            out = metrics.log_metrics(self._segments, keys, unreadable, self._cancels,
                                      self._maintenance.compactor.totals, now, reach)
        # outside the lock, as a live queue group's counts take the group's lock
        out["queues"] = self._queue_groups.counts(
            now, lambda key: self.clients.due_after([key], now, reach)[0])
        if self._tier is not None:
            with self._lock:
                out["remote"] = metrics.remote_metrics(self._segments, self._tier, reach)
        return out
