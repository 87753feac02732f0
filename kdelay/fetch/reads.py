"""Reads: every read of an open Log but the due-order page (due_order.py), each under the
log's lock. Records in offset order (Log.read, offset_order.py) and the first offset at or
after a time (Log.offset_for_time, time_lookup.py), which the Log delegates here; and what
the broker reads at the grain of stored batches, no record decoded: due batches after a
cursor (due_batches.py; the broker's due-order view numbers them) and stored batches in
offset order (a plain topic's fetch and a share fetch serve them); and where a batch
lies and where the active segment begins (the broker's producer-state walk).

A Log hands one out as `log.reads`; the broker's batch reads are not a user's surface."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..records import DeliveryKey, FetchedRecord, OffsetAndTimestamp
from ..validation import as_int, check_page_limits
from . import offset_order, time_lookup
from .due_batches import DueBatch, DueBatchReader
from .due_order import DueOrderReader

if TYPE_CHECKING:
    from ..log.cancellation.cancel_store import CancelStore
    from ..log.segments.segment_set import SegmentSet


class Reads:
    """One open Log's reads beside the due-order page (see the module docstring).
    `check_open` raises LogClosedError once the log is closed; `now` is the log clock;
    `due_order` the Log's page reader, whose remembered merges forget_merges drops too."""

    def __init__(self, check_open: Callable[[], None], lock: threading.RLock,
                 segments: SegmentSet, cancels: CancelStore, now: Callable[[], int],
                 due_order: DueOrderReader):
        self._check_open = check_open
        self._lock = lock
        self._segments = segments
        self._cancels = cancels
        self._now = now
        self._due = DueBatchReader()
        self._due_order = due_order

    def forget_merges(self) -> None:
        """Compaction or the tiered sync replaced segments: drop every remembered merge (the
        due-order page's and the due batch reads'). O(merges remembered)."""
        self._due_order.reset()
        self._due.reset()

    def records_from(self, offset: object, max_records: object) -> list[FetchedRecord]:
        """Log.read: records in offset order from `offset` (at least the log start), due
        or not."""
        offset = as_int(offset, "offset")
        max_records = check_page_limits(max_records)[0]
        self._check_open()  # first too: a forked child must not wait for the parent's lock
        with self._lock:
            self._check_open()
            return offset_order.read_from(
                self._segments, max(offset, self._segments.oldest.base_offset), max_records)

    def offset_for_time(self, timestamp: object) -> OffsetAndTimestamp | None:
        """Log.offset_for_time (time_lookup.offset_for_time)."""
        timestamp = as_int(timestamp, "timestamp")
        self._check_open()  # first too: a forked child must not wait for the parent's lock
        with self._lock:
            self._check_open()
            return time_lookup.offset_for_time(self._segments, timestamp)

    def active_base(self) -> int:
        """The active segment's base offset (a roll moves it on). O(1)."""
        return self._segments.active.base_offset

    def batch_position(self, offset: int) -> int | None:
        """Where the batch holding `offset` starts in its segment's .log (None: no segment
        holds it). O(log segments + log index entries) and a short header walk."""
        self._check_open()  # first too: a forked child must not wait for the parent's lock
        with self._lock:
            self._check_open()
            seg = self._segments.segment_for(offset)
            found = None if seg is None else seg.find_batch(offset)
        return None if found is None else found[0]

    def due(self, after: DeliveryKey | None, *, max_batches: int, max_bytes: int,
            with_bytes: bool) -> tuple[list[DueBatch], DeliveryKey | None, int]:
        """(batches, next, now): stored batches due at the log clock `now` after `after`,
        whole, in key order (DueBatchReader.read). Cost: per batch one heap step, plus
        with bytes one CRC-32C pass (the bytes a view of the mapping, not copied); O(sealed segments overlapping `after`)
        to start."""
        self._check_open()  # first too: a forked child must not wait for the parent's lock
        with self._lock:
            self._check_open()
            now = self._now()
            return (*self._due.read(self._segments, after, now, max_batches, max_bytes,
                                    self._cancels, with_bytes), now)

    def batches_from(self, offset: int, max_bytes: int) -> list[bytes]:
        """Stored batches in offset order from the one holding `offset`, checked, while
        their sizes keep within `max_bytes` (at least one). Cost: one offset-index search,
        then the batches read."""
        self._check_open()  # first too: a forked child must not wait for the parent's lock
        with self._lock:
            self._check_open()
            return offset_order.batches_from(self._segments, offset, max_bytes)
