"""Producer: single records accumulated into batches and appended by one background thread,
as Kafka's producer does, with the batch deliverAfter set from the records' (the KIP).

`send` runs on the caller's thread and does no I/O: it checks the record by log.append's
rules (and the log's delay and size limits), stamps it with the partition's log clock,
puts it in that partition's accumulator (accumulator.py: which batch it may join) and
returns a Future. One sender thread per Producer, woken by a Condition, appends each sealed
batch with `log.append(records, deliver_after=<the fold>)` and resolves its futures; a
batch is sealed when full, when its first record has waited `linger_ms` (monotonic time),
on flush()/close(), or when `buffer_records` records are waiting (then every open batch
is, oldest first, and `send` blocks until there is room). docs/producer.md argues the
choices.

One lock guards the accumulators and counters; the sender never holds it while it appends,
and `send` never holds it while it reads a log's clock. (Log.now() takes the log's own
lock, which an append holds: a send to a partition being appended to waits for that.)
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import NamedTuple

from ..config import LogConfig
from ..errors import InvalidConfigError, InvalidRecordError, KdelayError
from ..log.batch.builder import build_batch
from ..log.batch.codec import HEADER_SIZE
from ..partition import Log
from ..records import Header, Record
from ..validation import (
    MAX_INT64,
    BatchColumns,
    as_int,
    check_delay_limit,
    deliver_after_for_delay,
    record_columns,
    requested_deliver_after,
)
from .accumulator import Batch, Limits, PartitionAccumulator, record_bytes
from .topic import Topic

__all__ = ["Producer", "RecordMetadata"]

_names = itertools.count()


class RecordMetadata(NamedTuple):
    """Where a sent record landed: its partition (0 for a Log), offset, its batch's
    deliverAfter, and its timestamp as log.read shows it."""

    partition: int
    offset: int
    deliver_after: int
    timestamp: int


_PENDING = Future()._state  # the state a new Future starts in


class _RecordFuture(Future):
    """The Future of one sent record. The futures of a batch share its Condition: a
    Condition per future is most of the objects a pending record keeps alive, and the
    garbage collector's full passes over them made a send cost about twice the CPU
    (measured with bench/bench_producer.py). The sender resolves a batch's futures all
    while holding the Condition, so a waiter (Future.result waits once, without a loop)
    only wakes once its own future is done."""

    def __init__(self, batch: Batch):
        # Future.__init__'s attributes (a test holds them to a fresh Future's), without
        # the Condition it would make first: a third of a send's own time
        self._condition = batch.condition
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []

    def cancel(self) -> bool:
        """A sent record cannot be taken back (its batch may be on its way to disk)."""
        return False


class _Partition(NamedTuple):
    log: Log
    config: LogConfig
    accumulator: PartitionAccumulator


class Producer:
    """`Producer(log_or_topic, *, linger_ms=5, batch_records=500, batch_bytes=1 << 20,
    max_spread_ms=1_000, buffer_records=100_000, max_open_batches=32)`; `send`, `flush`,
    `close`, and a context manager. `max_open_batches` bounds the open batches of each
    partition (the oldest is sealed when a record needs one more)."""

    def __init__(self, target: Log | Topic, *, linger_ms: int = 5, batch_records: int = 500,
                 batch_bytes: int = 1 << 20, max_spread_ms: int = 1_000,
                 buffer_records: int = 100_000, max_open_batches: int = 32):
        if isinstance(target, Topic):
            self._topic: Topic | None = target
            logs = [target.partition(i) for i in range(target.partitions)]
        elif isinstance(target, Log):
            self._topic = None
            logs = [target]
        else:
            raise KdelayError(f"a Producer writes to a Log or a Topic, got "
                              f"{type(target).__name__}")
        self._linger_s = _setting(linger_ms, "linger_ms", 0) / 1000
        batch_records = _setting(batch_records, "batch_records", 1)
        batch_bytes = _setting(batch_bytes, "batch_bytes", 1)
        max_spread_ms = _setting(max_spread_ms, "max_spread_ms", 0)
        self._buffer_records = _setting(buffer_records, "buffer_records", 1)
        max_open = _setting(max_open_batches, "max_open_batches", 1)
        self._parts = [
            _Partition(log, log.config, PartitionAccumulator(i, Limits(
                batch_records, min(batch_bytes, log.config.max_batch_bytes), max_spread_ms,
                log.config.max_delivery_delay_ms, max_open)))
            for i, log in enumerate(logs)]
        self._sticky = 0 if self._topic is None else self._topic.partition_for(None)

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)   # the sender waits for batches
        self._done = threading.Condition(self._lock)   # flush and full buffers wait
        self._ready: deque[Batch] = deque()            # sealed, in sealing order
        self._sealed = 0          # batches ever sealed
        self._finished = 0        # of those, appended or failed (in sealing order)
        self._waiting = 0         # records sent and not yet resolved
        self._sender_idle = True  # the sender sleeps with no linger deadline
        self._closed = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kdelay-producer-{next(_names)}")
        self._thread.start()

    # ------------------------------------------------------------------ sending

    def send(self, value: bytes | None, key: bytes | None = None, *,
             headers: tuple[Header, ...] | list[Header] = (), timestamp: int | None = None,
             deliver_after: int | None = None, delay_ms: int | None = None,
             partition: int | None = None) -> Future:
        """Queue one record; returns a Future of its RecordMetadata. Bad input raises here
        (as log.append would refuse the record alone) and queues nothing. Blocks only
        while `buffer_records` records are waiting."""
        if self._closed:
            raise KdelayError("the producer is closed")
        values, keys, header_col, stamps, das = record_columns(
            (Record(value, key, headers, timestamp, deliver_after),))
        p = self._partition_of(partition, keys[0])
        part = self._parts[p]
        now = part.log.now()
        requested = das[0] if delay_ms is None else \
            deliver_after_for_delay(das[0], delay_ms, now)
        cfg = part.config
        stamp = now if stamps[0] is None else stamps[0]
        asked = requested is not None
        if asked:  # the log's rules for a deliverAfter, as for this record alone
            requested_deliver_after((requested,), None, path=part.log.path,
                                    delayed_delivery_enable=cfg.delayed_delivery_enable)
            check_delay_limit(cfg.max_delivery_delay_ms, requested, None, stamp)
        else:
            requested = now  # due at once: grouped with what is due now
        # headers copied: a list changed after send must not change what is written
        record = Record(values[0], keys[0], tuple(header_col[0] or ()), stamp, None)
        size = record_bytes(record)
        if HEADER_SIZE + size > cfg.max_batch_bytes:
            size = _alone(record, requested if asked else None, cfg)
        with self._lock:
            if self._closed:
                raise KdelayError("the producer is closed")
            if self._waiting >= self._buffer_records:
                self._wait_for_room()
            future, sealed = part.accumulator.add(record, requested, asked, size,
                                                  time.monotonic(), _RecordFuture)
            self._waiting += 1
            if sealed:
                self._seal(sealed)
            elif self._sender_idle:  # a first open batch: the sender must time its linger
                self._sender_idle = False
                self._work.notify()
        return future

    def _partition_of(self, partition: object, key: bytes | None) -> int:
        if partition is not None:
            return as_int(partition, "partition", hi=len(self._parts) - 1,
                          error=InvalidRecordError)
        if self._topic is None:
            return 0
        if key is None:
            return self._sticky  # read without the lock: a stale value is as good
        return self._topic.partition_for(key)

    def _wait_for_room(self) -> None:
        """With `buffer_records` waiting: seal every open batch (the sender appends them
        oldest first) and wait until there is room. A future's callback runs on the sender
        thread and must not wait for it: it goes over the buffer instead."""
        if threading.current_thread() is self._thread:
            return
        while self._waiting >= self._buffer_records:
            self._seal_open()
            self._done.wait()
            if self._closed:
                raise KdelayError("the producer is closed")

    def _seal(self, batches: list[Batch]) -> None:
        """Hand sealed batches to the sender; keyless records move on from a partition
        whose batch is sealed (Kafka's sticky partitioner)."""
        self._ready.extend(batches)
        self._sealed += len(batches)
        if self._topic is not None and any(b.partition == self._sticky for b in batches):
            self._sticky = self._topic.partition_for(None)
        self._work.notify()

    def _seal_open(self) -> None:
        batches = [b for part in self._parts for b in part.accumulator.seal_all()]
        if batches:
            batches.sort(key=lambda b: b.opened_at)
            self._seal(batches)

    # ------------------------------------------------------------------ flush / close

    def flush(self) -> None:
        """Return once every record sent before the call is appended or failed."""
        self._not_from_a_callback("flush")
        with self._lock:
            self._seal_open()
            target = self._sealed
            while self._finished < target:
                self._done.wait()

    def close(self) -> None:
        """Refuse further sends, flush, stop the sender thread. The logs stay open."""
        self._not_from_a_callback("close")
        with self._lock:
            self._closed = True
            self._done.notify_all()  # sends blocked on a full buffer give up
            self._seal_open()
            target = self._sealed
            while self._finished < target:
                self._done.wait()
            self._stopping = True
            self._work.notify()
        self._thread.join()

    def _not_from_a_callback(self, what: str) -> None:
        if threading.current_thread() is self._thread:
            raise KdelayError(f"producer.{what}() from a future's callback would wait for "
                              f"the thread running it")

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the sender

    def _run(self) -> None:
        while True:
            with self._lock:
                batches = self._next_batches()
            if not batches:
                return
            for batch in batches:
                self._append(batch)
            with self._lock:
                self._waiting -= sum(len(b.records) for b in batches)
                self._finished += len(batches)
                self._done.notify_all()

    def _next_batches(self) -> list[Batch]:
        """Called holding the lock: wait for sealed batches, sealing those whose linger is
        up meanwhile; [] once stopping with nothing left."""
        while True:
            now = time.monotonic()
            lingered = [b for part in self._parts
                        for b in part.accumulator.seal_opened_before(now - self._linger_s)]
            if lingered:
                lingered.sort(key=lambda b: b.opened_at)
                self._seal(lingered)
            if self._ready:
                batches = list(self._ready)
                self._ready.clear()
                return batches
            if self._stopping:
                return []
            opened = [t for part in self._parts
                      if (t := part.accumulator.oldest_opened()) is not None]
            self._sender_idle = not opened
            self._work.wait(None if not opened else
                            max(0.0, min(opened) + self._linger_s - time.monotonic()))

    def _append(self, batch: Batch) -> None:
        """Append one batch and resolve its futures: with the records' metadata, or all
        with what the append raised (a batch is appended whole or not at all)."""
        try:
            result = self._parts[batch.partition].log.append(
                batch.records, deliver_after=batch.deliver_after)
        except BaseException as e:  # every future must resolve; a simulated crash
            # (kdelay.testing.faults) is a BaseException and fails the batch too
            with batch.condition:
                for future in batch.tickets:
                    future.set_exception(e)
            return
        p, base, due = batch.partition, result.base_offset, result.deliver_after
        with batch.condition:
            for i, (future, record) in enumerate(zip(batch.tickets, batch.records,
                                                     strict=True)):
                future.set_result(RecordMetadata(p, base + i, due, record.timestamp))


def _setting(value: object, name: str, lo: int) -> int:
    return as_int(value, name, lo=lo, hi=MAX_INT64, error=InvalidConfigError)


def _alone(record: Record, requested: int | None, config: LogConfig) -> int:
    """Near max_batch_bytes the codec's bound is loose: build the record's batch as the log
    would (raising what log.append would refuse it with); it then fills a batch alone."""
    build_batch(BatchColumns((record.value,), (record.key,), (record.headers,),
                             (record.timestamp,), (None,)),
                base_offset=0, now=record.timestamp, requested=requested, config=config)
    return config.max_batch_bytes
