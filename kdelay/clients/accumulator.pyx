# cython: language_level=3
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
share, which the Producer makes ahead: `spare_condition`). A batch holds its records as columns (values, keys, headers, timestamps), which
the sender hands to the log as they are.

Compiled (Cython; the classes' fields are declared in accumulator.pxd): `add` runs once
per record sent, on the caller's thread and under the producer's lock; in Python its
bookkeeping cost as much as the record's checks.
"""

import threading
from collections import namedtuple

from ..errors import DeliveryDelayExceededError
from ..log.batch.codec import HEADER_SIZE
from ..log.batch.record_encode import header_block
from ..log.batch.record_loops import encode_bound
from ..validation import MAX_INT64, check_delay_limit

__all__ = ["Batch", "Limits", "PartitionAccumulator", "record_bytes"]


_NO_HEADERS = len(header_block(()))  # the block of a record without headers


def record_bytes(value, key, headers) -> int:
    """The most bytes a record can add to a batch, as the codec bounds a batch's size
    (encode_bound: its payloads and header block plus the widest varints), whatever its
    offset and timestamp deltas turn out to be."""
    payload = (0 if key is None else len(key)) + (0 if value is None else len(value))
    return encode_bound(0, 1, payload, len(header_block(headers)) if headers else _NO_HEADERS)


Limits = namedtuple("Limits", [
    "batch_records",
    "byte_cap",       # min(batch_bytes, the log's max_batch_bytes), counted by record_bytes
    "max_spread_ms",
    "max_delay_ms",   # the log's max_delivery_delay_ms (0: no limit)
    "max_open",       # open batches per partition
])
Limits.__doc__ = "What bounds one partition's batches."


cdef class Batch:
    """Records waiting to be appended together to one partition, column by column, with a
    ticket each (the Producer's futures, which share `condition`). `latest` is the largest
    requested deliverAfter; `asked` says whether any record asked for one (else the log
    stamps the batch at append time); `has_headers` whether any record has headers."""

    def __init__(self, int partition, double opened_at, condition):
        self.partition = partition
        self.opened_at = opened_at
        self.values = []
        self.keys = []
        self.headers = []
        self.stamps = []
        self.tickets = []
        self.latest = 0
        self.earliest_stamp = MAX_INT64
        self.asked = False
        self.has_headers = False
        self.size = HEADER_SIZE
        self.condition = condition

    def __len__(self) -> int:
        return len(self.values)

    @property
    def deliver_after(self):
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


cdef class PartitionAccumulator:
    """The open batches of one partition, by bucket of requested time, oldest first."""

    def __init__(self, int partition, limits: Limits):
        self.partition = partition
        self.limits = limits
        self._bucket_ms = <uint64_t>limits.max_spread_ms + 1  # max_spread_ms < 2**63
        self._byte_cap = limits.byte_cap
        self._batch_records = limits.batch_records
        self._max_open = limits.max_open
        self._max_delay_ms = limits.max_delay_ms
        self._open = {}  # insertion order: opening order
        self.spare_condition = None

    def __len__(self) -> int:
        return len(self._open)

    cdef bint _joins(self, Batch batch, int64_t requested, bint asked, int64_t stamp,
                     uint64_t size) except -1:
        if batch.size + size > self._byte_cap:
            return False
        if self._max_delay_ms and (asked or batch.asked):
            return _within_delay_limit(self._max_delay_ms, max(batch.latest, requested),
                                       min(batch.earliest_stamp, stamp))
        return True

    cpdef tuple add(self, value, key, tuple headers, int64_t stamp, int64_t requested,
                    bint asked, uint64_t size, double now, make_ticket):
        """Put a record (stamped: `stamp` is its timestamp) in its bucket's open batch,
        opening one if needed, with the ticket `make_ticket(batch)`; returns the ticket and
        the batches this sealed (full, or making room), oldest first. `size` is
        record_bytes of the record (more for a record that must go alone)."""
        cdef list sealed = []
        bucket = <uint64_t>requested // self._bucket_ms
        cdef Batch batch = self._open.get(bucket)
        if batch is not None and not self._joins(batch, requested, asked, stamp, size):
            sealed.append(self._open.pop(bucket))
            batch = None
        if batch is None:
            if len(self._open) >= self._max_open:
                sealed.append(self._open.pop(next(iter(self._open))))
            batch = Batch(self.partition, now, self._take_condition())
            self._open[bucket] = batch
        batch.values.append(value)
        batch.keys.append(key)
        batch.headers.append(headers)
        batch.stamps.append(stamp)
        ticket = make_ticket(batch)
        batch.tickets.append(ticket)
        if requested > batch.latest:
            batch.latest = requested
        if stamp < batch.earliest_stamp:
            batch.earliest_stamp = stamp
        if asked:
            batch.asked = True
        if headers:
            batch.has_headers = True
        batch.size += size
        if len(batch.values) >= self._batch_records or batch.size >= self._byte_cap:
            sealed.append(self._open.pop(bucket))
        return ticket, sealed

    cdef object _take_condition(self):
        """The next batch's Condition: the spare made outside the producer's lock (making one
        runs Python code, where the thread may lose the GIL while it holds that lock), or,
        when there is none, a new one."""
        condition = self.spare_condition
        self.spare_condition = None
        return condition if condition is not None else threading.Condition()

    def oldest_opened(self):
        """When the oldest open batch got its first record (None: none is open)."""
        for batch in self._open.values():
            return (<Batch>batch).opened_at
        return None

    def seal_opened_before(self, double cutoff) -> list:
        """Seal the batches whose first record came at or before `cutoff`, oldest first."""
        cdef list sealed = []
        while self._open:
            bucket, batch = next(iter(self._open.items()))
            if (<Batch>batch).opened_at > cutoff:
                break
            del self._open[bucket]
            sealed.append(batch)
        return sealed

    def seal_all(self) -> list:
        sealed = list(self._open.values())
        self._open.clear()
        return sealed
