"""The producer's open batches of one partition, and which record may join which batch.

A record asks for a deliverAfter (`requested`); its batch is appended with the max of its
records' (the KIP's fold), so a record may only share a batch with records requested within
`max_spread_ms` of its own. Buckets keep that rule by construction: records share a batch
only within one bucket of `max_spread_ms + 1` ms of requested time (so any two differ by at
most `max_spread_ms`), and finding a record's batch is one dict lookup, however many are
open.

A batch also stays within what the log accepts, so that no record `send` took is refused
later because of its batch: at most `byte_cap` bytes as the codec bounds them
(record_bytes), and, when the log has a delay limit, its deliverAfter minus its earliest
timestamp within the limit (checked by the log's own rule, validation.check_delay_limit).
A record that would break either starts a new batch in its bucket.

At most `max_open` batches are open per partition: a record that needs one more seals the
oldest first. Everything here is bookkeeping: the Producer holds its lock around every
call and passes the monotonic time in (a batch only carries the Condition its futures
share).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

from ..errors import DeliveryDelayExceededError
from ..log.batch.codec import HEADER_SIZE
from ..log.batch.record_encode import header_block
from ..log.batch.record_loops import encode_bound
from ..records import Record
from ..validation import MAX_INT64, check_delay_limit

__all__ = ["Batch", "Limits", "PartitionAccumulator", "record_bytes"]


def record_bytes(record: Record) -> int:
    """The most bytes `record` can add to a batch, as the codec bounds a batch's size
    (encode_bound: its payloads and header block plus the widest varints), whatever its
    offset and timestamp deltas turn out to be."""
    payload = (0 if record.key is None else len(record.key)) + \
        (0 if record.value is None else len(record.value))
    return encode_bound(0, 1, payload, len(header_block(record.headers)))


class Limits(NamedTuple):
    """What bounds one partition's batches."""

    batch_records: int
    byte_cap: int       # min(batch_bytes, the log's max_batch_bytes), counted by record_bytes
    max_spread_ms: int
    max_delay_ms: int   # the log's max_delivery_delay_ms (0: no limit)
    max_open: int       # open batches per partition


class Batch:
    """Records waiting to be appended together to one partition, with a ticket each (the
    Producer's futures, which share `condition`). `latest` is the largest requested
    deliverAfter; `asked` says whether any record asked for one (else the log stamps the
    batch at append time)."""

    __slots__ = ("asked", "condition", "earliest_stamp", "latest", "opened_at", "partition",
                 "records", "size", "tickets")

    def __init__(self, partition: int, opened_at: float):
        self.partition = partition
        self.opened_at = opened_at
        self.records: list[Record] = []
        self.tickets: list = []
        self.latest = 0
        self.earliest_stamp = MAX_INT64
        self.asked = False
        self.size = HEADER_SIZE
        self.condition = threading.Condition()

    @property
    def deliver_after(self) -> int | None:
        """What to pass to log.append: the fold of the requested deliverAfters, or None when
        no record asked for one (due at append time, as a lone record would be)."""
        return self.latest if self.asked else None


def _within_delay_limit(limit: int, due: int, earliest_stamp: int) -> bool:
    """Whether the log would accept a batch due at `due` whose earliest timestamp is
    `earliest_stamp`: the log's own check decides."""
    try:
        check_delay_limit(limit, due, None, earliest_stamp)
    except DeliveryDelayExceededError:
        return False
    return True


class PartitionAccumulator:
    """The open batches of one partition, by bucket of requested time, oldest first."""

    def __init__(self, partition: int, limits: Limits):
        self.partition = partition
        self.limits = limits
        self._bucket_ms = limits.max_spread_ms + 1
        self._open: dict[int, Batch] = {}  # insertion order: opening order

    def __len__(self) -> int:
        return len(self._open)

    def _joins(self, batch: Batch, requested: int, asked: bool, stamp: int, size: int) -> bool:
        if batch.size + size > self.limits.byte_cap:
            return False
        limit = self.limits.max_delay_ms
        if limit and (asked or batch.asked):
            return _within_delay_limit(limit, max(batch.latest, requested),
                                       min(batch.earliest_stamp, stamp))
        return True

    def add(self, record: Record, requested: int, asked: bool, size: int, now: float,
            make_ticket: Callable[[Batch], object]) -> tuple[object, list[Batch]]:
        """Put `record` (stamped: its timestamp is set) in its bucket's open batch, opening
        one if needed, with the ticket `make_ticket(batch)`; returns the ticket and the
        batches this sealed (full, or making room), oldest first. `size` is
        record_bytes(record) (more for a record that must go alone)."""
        sealed = []
        bucket = requested // self._bucket_ms
        batch = self._open.get(bucket)
        stamp = record.timestamp
        if batch is not None and not self._joins(batch, requested, asked, stamp, size):
            sealed.append(self._open.pop(bucket))
            batch = None
        if batch is None:
            if len(self._open) >= self.limits.max_open:
                sealed.append(self._open.pop(next(iter(self._open))))
            batch = self._open[bucket] = Batch(self.partition, now)
        batch.records.append(record)
        ticket = make_ticket(batch)
        batch.tickets.append(ticket)
        if requested > batch.latest:
            batch.latest = requested
        if stamp < batch.earliest_stamp:
            batch.earliest_stamp = stamp
        if asked:
            batch.asked = True
        batch.size += size
        if len(batch.records) >= self.limits.batch_records or batch.size >= self.limits.byte_cap:
            sealed.append(self._open.pop(bucket))
        return ticket, sealed

    def oldest_opened(self) -> float | None:
        """When the oldest open batch got its first record (None: none is open)."""
        for batch in self._open.values():
            return batch.opened_at
        return None

    def seal_opened_before(self, cutoff: float) -> list[Batch]:
        """Seal the batches whose first record came at or before `cutoff`, oldest first."""
        sealed = []
        while self._open:
            bucket, batch = next(iter(self._open.items()))
            if batch.opened_at > cutoff:
                break
            del self._open[bucket]
            sealed.append(batch)
        return sealed

    def seal_all(self) -> list[Batch]:
        sealed = list(self._open.values())
        self._open.clear()
        return sealed
