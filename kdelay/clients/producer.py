"""Producer: single records accumulated into batches and appended by one background thread,
as Kafka's producer does, with the batch deliverAfter set from the records' (the KIP).

`send` runs on the caller's thread and does no I/O; it is compiled, with the records the
producer holds, in producer_core.pyx (the record checked, stamped with its partition's log
clock and put in its batch; accumulator.pyx: which batch it may join); it returns a Future
(record_future.pyx). One sender thread per Producer appends each sealed batch with
`deliver_after=<the fold>`, its records handed to the log as columns, and resolves its
futures. docs/producer.md argues the choices.
"""

from __future__ import annotations

import itertools
import threading

from .. import forks
from ..errors import InvalidConfigError, KdelayError
from ..partition import Log
from ..records import Record, RecordMetadata
from ..validation import MAX_INT64, as_int
from .accumulator import Batch, Limits
from .producer_core import ProducerCore
from .record_future import fail, resolve
from .topic import Topic

__all__ = ["Producer", "RecordMetadata"]

_names = itertools.count()


class Producer(ProducerCore):
    """`Producer(log_or_topic, *, linger_ms=5, batch_records=500, batch_bytes=1 << 20,
    max_spread_ms=1_000, buffer_records=100_000, max_open_batches=32)`; `send` (from
    ProducerCore), `flush`, `close`, and a context manager. `max_open_batches` bounds the
    open batches of each partition (the oldest is sealed when a record needs one more)."""

    def __init__(self, target: Log | Topic, *, linger_ms: int = 5, batch_records: int = 500,
                 batch_bytes: int = 1 << 20, max_spread_ms: int = 1_000,
                 buffer_records: int = 100_000, max_open_batches: int = 32):
        if isinstance(target, Topic):
            topic: Topic | None = target
            logs = [target.partition(i) for i in range(target.partitions)]
            what = f"topic {target.name!r}"
        elif isinstance(target, Log):
            topic = None
            logs = [target]
            what = f"log {target.path}"
        else:
            raise KdelayError(f"a Producer writes to a Log or a Topic, got "
                              f"{type(target).__name__}")
        self._linger_s = _setting(linger_ms, "linger_ms", 0) / 1000
        batch_records = _setting(batch_records, "batch_records", 1)
        batch_bytes = _setting(batch_bytes, "batch_bytes", 1)
        max_spread_ms = _setting(max_spread_ms, "max_spread_ms", 0)
        buffer_records = _setting(buffer_records, "buffer_records", 1)
        max_open = _setting(max_open_batches, "max_open_batches", 1)
        limits = [Limits(batch_records, min(batch_bytes, log.config.max_batch_bytes),
                         max_spread_ms, log.config.max_delivery_delay_ms, max_open)
                  for log in logs]
        for log in logs:
            log.clients.check_open()  # a closed Log, or a forked child's copy of one
        super().__init__(logs, limits, topic, buffer_records)
        name = f"kdelay-producer-{next(_names)}"
        self._owner = forks.Ownership(self, f"producer {name} of {what}")
        self._held: list[Batch] = []  # the batches the sender is appending
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._sender = self._thread
        self._thread.start()

    # ------------------------------------------------------------------ flush / close

    def flush(self) -> None:
        """Return once every record sent before the call is appended or failed."""
        self._not_from_a_callback("flush")
        self._flush()

    def close(self) -> None:
        """Refuse further sends, flush, stop the sender thread. The logs stay open."""
        self._not_from_a_callback("close")
        self._close()
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
        try:
            while batches := self._next_batches(self._linger_s):
                self._held = batches
                for batch in batches:
                    self._append(batch)
                self._finished_batches(batches)
                self._held = []
        except BaseException as e:  # whatever it dies of, nobody may wait for it forever
            self._sender_died(self._held, e)
            raise

    def _orphaned(self) -> None:
        """kdelay.forks: in a forked child this copy is dead (it has no sender thread)."""
        self._orphan(self._held)

    def _append(self, batch: Batch) -> None:
        """Append one batch and resolve its futures: with the records' metadata, or all
        with what the append raised (a batch is appended whole or not at all)."""
        log = self._log_of(batch.partition)
        try:
            if batch.has_headers:  # append_columns takes none
                result = log.append(list(map(Record, batch.values, batch.keys, batch.headers,
                                             batch.stamps)), deliver_after=batch.deliver_after)
            else:
                result = log.append_columns(batch.values, keys=batch.keys,
                                            timestamps=batch.stamps,
                                            deliver_after=batch.deliver_after)
        except BaseException as e:  # every future must resolve; a simulated crash
            # (kdelay.testing.faults) is a BaseException and fails the batch too
            fail(batch.tickets, batch.condition, e)
        else:
            resolve(batch.tickets, batch.condition, batch.partition, result.base_offset,
                    result.deliver_after, batch.stamps)
        # the futures are the callers' now: a future nobody holds goes at once, rather
        # than with the sender's batches, which outlive the collector's young passes
        batch.tickets.clear()


def _setting(value: object, name: str, lo: int) -> int:
    return as_int(value, name, lo=lo, hi=MAX_INT64, error=InvalidConfigError)
