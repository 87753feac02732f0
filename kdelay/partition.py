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

from . import facade_calls, forks, validation
from .clock import Clock, wall_clock
from .config import LogConfig
from .errors import OffsetOutOfRangeError, write_errors
from .fetch.append_notices import AppendListener, AppendNotices
from .fetch.due_order import DueOrderReader, resolve_cursor
from .fetch.long_poll import ActivitySignal
from .fetch.reads import Reads
from .groups.client_access import ClientAccess
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
    from .log.tiered.tier import RemoteTier

__all__ = ["Clock", "Log", "OffsetOutOfRangeError"]

_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot paths)


class Log(forks.Owned):
    """One partition. Open with `Log.open(path, config=..., clock=...)`."""

    # its lock and closed flag, held by its compiled calls' CallParts (facade_calls.pyx)
    _lock, _closed = facade_calls.PartsField("lock"), facade_calls.PartsField("closed")

    def __init__(self, path: str, config: LogConfig, clock: Clock, opened: Opened,
                 tier: RemoteTier | None = None):
        self.path, self.config = path, config
        self._load_report = opened.report
        self._clock, lock = LogClock(clock), threading.RLock()
        self._segments, self._cancels = opened.segments, opened.cancels
        self._tier = tier  # tiered storage (None: none)
        self._life = Lifetime(self, path, opened)  # marker, clean close, descriptors
        self._writer = Writer(config, self._segments, self._cancels, self._life, self._clock)
        self._due_order = DueOrderReader()
        self._gate = self._due_order.gate  # the idle poll's answer (fetch/quiet_gate.pyx)
        self._notices = AppendNotices(lock, self._due_order)
        self._call_parts = facade_calls.CallParts(lock, self._writer, self._notices, self._gate,
                                                  self._clock, config.delayed_delivery_enable)
        self._owner = forks.Ownership(self, f"log {path}")
        me = weakref.proxy(self)  # what the parts call back holds no reference to the Log

        def check_open() -> None:
            me._check_open()

        self.reads = Reads(check_open, self._lock, self._segments, self._cancels, self._clock.now,
                           self._due_order)
        self._maintenance = Maintenance(
            path, config, self._segments, self._lock, self._cancels, self._life, self._writer,
            now=self._clock.now, check_open=check_open, is_closed=lambda: me._closed,
            after_change=self.reads.forget_merges)
        self.clients = ClientAccess(path, check_open, self._lock, self._segments,
                                    self._cancels, self._clock.now, self.add_append_listener)

    @classmethod
    def open(cls, path: str | os.PathLike, config: LogConfig | None = None,
             clock: Clock | None = None) -> Log:
        """Open (creating if missing) and recover the log directory at `path`. Cost: after
        a clean close no .log data is read; after a crash, a scan past the recovery point."""
        path, config = validation.check_open_args(path, config, clock)
        opened, tier = open_with_tier(path, config)
        log = cls(path, config, clock or wall_clock, opened, tier)
        try:  # no running backwards across a restart: the clean close's clock, commits'
            log._clock.floor = max(opened.clock_floor, log.clients.positions.max_clock())
            log._life.start_horizon(log._clock.floor)  # what lock-free readers may assume
            if tier is not None:
                log._maintenance.start_remote_sync(tier)
        except BaseException:
            log.close()
            raise
        return log

    @property
    def load_report(self) -> LoadReport:
        """What opening found and did; reading it loads and checks every index a clean open
        deferred to first use (log/local/loader.py), so that it names all the damage. Cost:
        O(segments) the first time, O(1) after."""
        with self._lock:
            if not self._closed:
                self._load_report.finish_deferred()
        return self._load_report

    @write_errors
    def close(self) -> None:
        """Close the queue groups, flush, persist the active segment's indexes, mark the
        shutdown clean; every later call of the Log or what is attached to it raises
        LogClosedError. Again: nothing. In a forked child: ForkedProcessError."""
        with self._lock:
            if self._closed:
                self._owner.check_close_again()
                return
            self._closed = True
        try:
            self._maintenance.stop()  # its passes take the lock: not held here
            # no queue group writes once close returns; outside the log's lock, as a poll
            # holds its group's lock while it reads the log
            self.clients.close()
        finally:
            with self._lock:
                try:
                    self._life.close_clean(self._clock.floor)
                finally:
                    self._life.release()
                    self._notices.signal.bump_under_lock()

    def _orphaned(self) -> None:
        """In a forked child (kdelay.forks): closed for good; new locks (see forks.py)."""
        self._closed, self._lock = True, threading.RLock()
        self._notices.signal = ActivitySignal(self._lock)
        self.clients.queue_groups.orphaned()
        self._life.orphaned()

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call `listener(result)` after every append, outside the lock (a Topic's wake-up)."""
        self._notices.listeners.append(listener)

    def now(self) -> int:
        """The log clock: never below any time it has handed out (read without the log's
        lock, which an append holds). A clock value not an int in [0, 2**63): KdelayError."""
        return self._clock.now()

    # ------------------------------------------------------------------ writing

    append = facade_calls.append  # one C call for plain Records; the rest: _append_judged

    def _append_judged(self, records: Record | Sequence[Record], deliver_after: int | None,
                       delay_ms: int | None) -> AppendResult:
        """`append` of what its compiled call leaves to Python: a delay in ms, or records
        that the compiled check does not take (other types, wrong values: judged and worded
        by validation)."""
        if delay_ms is not None:
            deliver_after = validation.deliver_after_for_delay(deliver_after, delay_ms,
                                                               self.now())
        if type(records) is Record:  # a batch of one
            records = (records,)
        plain = RecordsBatch.of(records, deliver_after, self.config.delayed_delivery_enable)
        if plain is not None:  # checked in one compiled pass (the common types)
            return self._append_requested(plain, plain.requested)
        return self._append(record_columns(records), deliver_after)

    @write_errors
    def append_columns(self, values: Sequence[bytes | None] | PackedBinary, *,
                       keys: Sequence[bytes | None] | PackedBinary | None = None,
                       timestamps: Sequence[int | None] | np.ndarray | None = None,
                       deliver_after: int | None = None) -> AppendResult:
        """`append` of a batch given as columns (no headers; values and keys may be
        PackedBinary, timestamps an int array: no Python work per row). Cost: as `append`,
        with the checks done column-wise (log/batch/columns.py)."""
        return self._append(batch_columns(values, keys, timestamps), deliver_after)

    @write_errors
    def append_client_batch(self, batch: ClientBatch, *, spread_ms: int = 0,
                            log_append_time: bool = False,
                            producer: tuple[int, int, int] = (-1, -1, -1)) -> AppendResult:
        """Store a Kafka client's checked batch (the broker's produce) as runs of consecutive
        offsets, each due at the latest time its records asked for, none over `spread_ms`
        later (client_batch.pyx); `producer`: (id, epoch, first sequence) for the headers.
        Returns the earliest run's; all or nothing. Cost: one C pass, one write, index upkeep
        per stored batch."""
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
        return facade_calls.write_batch(self, columns, requested)  # (as `append`'s, in C)

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
        """Withdraw pending records by offset (an int or iterable of ints), skipping those
        cancelled, due or not in the log; returns how many were cancelled. Durable per the
        flush policy. Cost: O(offsets + batches spanned), a journal append per segment."""
        wanted = validation.offsets_arg(offsets)
        with self._lock:
            self._check_open()
            return self._writer.cancel(wanted)

    @write_errors
    def reschedule(self, offset: int, deliver_after: int | None = None, *,
                   delay_ms: int | None = None) -> AppendResult:
        """Move one pending record: cancel it and append a copy (same key, value, headers,
        timestamp) due at `deliver_after` (or now plus `delay_ms`), atomically across
        crashes (log/cancellation/journal.py); KdelayError if cancelled, due or not in the
        log. Cost: one batch found by offset and read, one append, two journal entries."""
        off, due = validation.reschedule_args(offset, deliver_after, delay_ms, self.now,
                                              self.config, self.path)
        with self._lock:
            self._check_open()
            result = self._notices.under_lock(self._writer.reschedule(off, due))
        return self._notices.after(result)

    # ------------------------------------------------------------------ reading

    fetch = facade_calls.fetch  # the idle poll in one C call; every other page: _fetch_page

    def _fetch_page(self, after: DeliveryKey | int | None, max_records: int, max_bytes: int,
                    max_wait_ms: int) -> FetchResult:
        """`fetch` beyond the idle poll: the limits checked, then a page (or a long poll)."""
        max_records, max_bytes, max_wait_ms = validation.check_page_limits(
            max_records, max_bytes, max_wait_ms)
        deadline = time.monotonic() + max_wait_ms / 1000 if max_wait_ms else 0.0
        with self._lock:
            if self._closed:
                self._check_open()
            cursor = resolve_cursor(self._segments, after)
            if not max_wait_ms:  # not a long poll
                return self._due_order.fetch_page(self._segments, cursor, self._clock.now(),
                                                  max_records, max_bytes, self._cancels)
            return self._due_order.wait_for_page(
                self._segments, cursor, max_records, max_bytes, self._cancels,
                deadline=deadline, now=self.now, signal=self._notices.signal,
                check_open=self._check_open)

    def read(self, offset: int, *, max_records: int = 500) -> list[FetchedRecord]:
        """Records in plain offset order from `offset` (due or not). Cost: O(log segments),
        a short header walk from the offset index, then the batches returned."""
        return self.reads.records_from(offset, max_records)

    def offset_for_time(self, timestamp: int) -> OffsetAndTimestamp | None:
        """(offset, timestamp) of the first record in offset order whose timestamp is >=
        `timestamp` (None: none), as Kafka's offsetsForTimes. Cost: O(log segments + log
        index entries), a walk of about one index interval, one batch decoded."""
        return self.reads.offset_for_time(timestamp)

    # ------------------------------------------------------------------ groups

    @write_errors
    def commit(self, group: str, key: DeliveryKey | None, *,
               generation: int | None = None) -> None:
        """Durably store `group`'s position (the key of the last record it consumed). With
        `generation` (from `clients.join_group`), refused with GroupFencedError once a
        newer member has joined. Cost: one append to the log's commit journal and one
        fdatasync (groups/positions.py)."""
        self.clients.commit(group, key, generation)

    @write_errors
    def commit_many(self, positions: dict[str, DeliveryKey | None]) -> None:
        """Durably store several groups' positions at once (a broker's group commit).
        Cost: one append of a record per group and one fdatasync for them all
        (groups/positions.py)."""
        self.clients.commit_many(positions)

    def committed(self, group: str) -> DeliveryKey | None:
        """`group`'s stored position (None: none). Cost: a dict lookup."""
        return self.clients.committed(group)

    # ------------------------------------------------------------------ maintenance

    @write_errors
    def enforce_retention(self) -> int:
        """Delete the oldest sealed segments all due for longer than `retention_ms`, and
        those all due while over `retention_bytes`; then compact if `compaction_min_ratio`
        > 0. Returns how many were deleted. Cost: O(segments deleted), plus a compaction's."""
        return self._maintenance.enforce_retention()

    @write_errors
    def sync_remote(self) -> RemoteSyncResult:
        """Tiered storage: one pass of the background sync now (tiered/sync.py), returning what
        it did; RemoteStorageError if the store fails (local appends and reads go on);
        nothing without `remote_storage`. Cost: one upload per segment copied."""
        return self._maintenance.sync_remote()

    @write_errors
    def compact(self) -> CompactionResult:
        """Rewrite sealed segments where at least `compaction_min_ratio` of the bytes are
        removable (due past `retention_ms`, or cancelled) without them, others keeping their
        offsets, the lock held only per swap (log/compaction/compactor.py). Cost: one read
        of those segments, one write of what survives, memory O(one segment's index)."""
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
        """Counts and sizes for monitoring, with each consumer group's committed key and
        lag (records due now after it) and each queue group's counts (queue_groups.py).
        Cost: O(segments + batches due) and one file read per consumer group."""
        return self.clients.metrics(self._maintenance.compactor.totals, self._tier)
