# cython: language_level=3, annotation_typing=False
"""The Producer's compiled core (producer.py's Producer derives from it): `send`, and the
records it holds between `send` and the append: every partition's open batches
(accumulator.pyx), the sealed batches waiting for the sender thread, and the counts that
flush, close and back-pressure wait on. One lock guards it all; the sender never holds it
while it appends, and `send` holds it only to put the record in its batch.

`send` runs on the caller's thread and does no I/O: it checks the record by log.append's
rules (kdelay.log.batch.columns.record_fields; the log's deliverAfter and size limits), picks its
partition, stamps it with that partition's log clock (Log.now() takes no lock of the log's
that an append holds), and puts it in its batch with a Future (record_future.pyx). A batch
is sealed when full, on flush()/close(), or when `buffer_records` records are waiting
(then every open batch is, oldest first, and `send` blocks until there is room); the
sender seals the batches whose first record has waited `linger_ms` (monotonic time) and
takes the sealed ones in sealing order. docs/producer.md argues the choices.

Compiled (Cython): `send` runs once per record on the caller's thread, and its
Python-level glue (the calls and branches between the checks, which stay validation's)
cost as much as the checks themselves; the Producer derives from this class so that a
send is one call. Annotations are documentation here (annotation_typing=False): a bytes
subclass is a valid value, as log.append takes it.
"""

import threading
from collections import deque
from concurrent.futures import Future
from time import monotonic

from ..errors import InvalidRecordError, KdelayError
from ..log.batch.builder import build_batch
from ..log.batch.codec import HEADER_SIZE
from ..log.batch.columns import BatchColumns, record_fields
from ..records import Header
from ..validation import (
    as_int,
    check_delay_limit,
    deliver_after_for_delay,
    requested_deliver_after,
)
from .accumulator cimport Batch, PartitionAccumulator

from .accumulator import record_bytes
from .partitioner import partition_for_key
from .record_future import abandon, fail, new_future

__all__ = ["ProducerCore"]


cdef class _Partition:
    """One partition's log and open batches, and what `send` checks against its config."""

    cdef readonly object log, config
    cdef readonly PartitionAccumulator accumulator
    cdef object alone_above  # a record's record_bytes above this: sized by the log itself
    cdef bint checks_due     # whether _check_due can refuse anything here

    def __init__(self, int partition, log, limits):
        self.log = log
        self.config = log.config
        self.accumulator = PartitionAccumulator(partition, limits)
        self.alone_above = self.config.max_batch_bytes - HEADER_SIZE
        # with delayed delivery on and no delay limit, the log takes any deliverAfter that
        # record_fields or deliver_after_for_delay passed: no call per record to say so
        self.checks_due = (not self.config.delayed_delivery_enable
                           or self.config.max_delivery_delay_ms != 0)


def _opening_time(batch) -> float:
    return batch.opened_at


cdef extern from "<sched.h>" nogil:
    int sched_yield()


cdef class ProducerCore:
    """`send` for the callers; `_next_batches`/`_finished_batches` for the sender thread;
    `_flush`/`_close` for the Producer. `_sender` is the sender thread (set before it
    starts): a send from a future's callback, which runs there, never waits for room.

    The lock and the GIL: a thread that blocks on the lock is woken owning it but not the
    GIL, so the GIL holder's next send blocks on it in turn, and so on: a lock convoy in
    which every send costs two trips through the OS (measured: 3x the CPU, 20,000 context
    switches in 60,000 sends, and once started it lasts). So `send` never blocks on the
    lock: while another thread holds it (it can only have lost the GIL inside), it yields
    the GIL and tries again; and nothing `send` runs under the lock runs Python code (where
    the GIL may be taken away): the next batch's Condition is made before, the sender is
    woken through a bare lock, and the sticky partition moves on after."""

    cdef list _parts
    cdef object _topic
    cdef Py_ssize_t _buffer_records
    cdef object _lock, _done
    cdef object _acquire, _release  # the lock's, bound once (send takes it per record)
    cdef object _wake            # released to wake the sender (a bare lock: no Python code)
    cdef object _ready           # sealed batches, in sealing order
    cdef Py_ssize_t _sticky      # where keyless records go (read without the lock)
    cdef Py_ssize_t _sealed      # batches ever sealed
    cdef Py_ssize_t _finished    # of those, appended or failed (in sealing order)
    cdef Py_ssize_t _waiting     # records sent and not yet resolved
    cdef Py_ssize_t _done_waiters  # threads waiting on _done (flush, a full buffer)
    cdef bint _sender_idle       # the sender sleeps with no linger deadline
    cdef bint _closed, _stopping
    cdef bint _forked            # this is a forked child's copy (kdelay.forks): dead here
    cdef object _death           # why the sender thread died (None: it did not)
    cdef object _death_cause     # the exception it died of
    cdef public object _sender
    cdef public object _owner    # its kdelay.forks.Ownership, set by the Producer

    def __init__(self, list logs, list limits, topic, Py_ssize_t buffer_records):
        self._parts = [_Partition(i, log, lim) for i, (log, lim) in enumerate(zip(logs, limits))]
        self._topic = topic
        self._buffer_records = buffer_records
        self._sticky = 0 if topic is None else topic.partition_for(None)
        self._lock = threading.Lock()
        self._acquire, self._release = self._lock.acquire, self._lock.release
        self._done = threading.Condition(self._lock)  # flush and full buffers wait
        self._wake = threading.Lock()
        self._wake.acquire()  # held: the sender waits until a send or close releases it
        self._ready = deque()
        self._sealed = self._finished = self._waiting = self._done_waiters = 0
        self._sender_idle = True
        self._closed = self._stopping = self._forked = False
        self._death = self._death_cause = None
        self._sender = None
        self._owner = None

    # ------------------------------------------------------------------ sending

    def send(self, value: bytes | None, key: bytes | None = None, *,
             headers: tuple[Header, ...] | list[Header] = (), timestamp: int | None = None,
             deliver_after: int | None = None, delay_ms: int | None = None,
             partition: int | None = None) -> Future:
        """Queue one record; returns a Future of its RecordMetadata. Bad input raises here
        (as log.append would refuse the record alone) and queues nothing. Blocks only
        while `buffer_records` records are waiting."""
        if self._closed:
            raise self._refusal()
        headers, timestamp, deliver_after = record_fields(value, key, headers, timestamp,
                                                          deliver_after)
        cdef _Partition part = self._parts[self._partition_of(partition, key)]
        now = part.log.now()
        if delay_ms is not None:
            deliver_after = deliver_after_for_delay(deliver_after, delay_ms, now)
        stamp = now if timestamp is None else timestamp
        cdef bint asked = deliver_after is not None
        if asked:
            if part.checks_due:
                _check_due(part, deliver_after, stamp)
            requested = deliver_after
        else:
            requested = now  # due at once: grouped with what is due now
        size = record_bytes(value, key, headers)
        if size > part.alone_above:
            size = _alone(value, key, headers, stamp, deliver_after, part.config)
        if part.accumulator.spare_condition is None:  # a Condition's __init__ is Python
            part.accumulator.spare_condition = threading.Condition()
        cdef bint sticky_sealed = False
        self._lock_for_send()
        try:
            if self._closed:
                raise self._refusal()
            if self._waiting >= self._buffer_records:
                sticky_sealed = self._wait_for_room()
            future, sealed = part.accumulator.add(value, key, headers, stamp, requested,
                                                  asked, size, monotonic(), new_future)
            self._waiting += 1
            if sealed:
                sticky_sealed |= self._seal(sealed)
            elif self._sender_idle:  # a first open batch: the sender must time its linger
                self._sender_idle = False
                self._wake_sender()
        finally:
            self._release()
        if sticky_sealed:
            self._next_sticky()
        return future

    cdef _lock_for_send(self):
        """Take the lock without ever blocking on it (see the class): while it is held,
        let the GIL go (and the CPU: the holder may be waiting for either) and try again."""
        while not self._acquire(False):
            with nogil:
                sched_yield()

    cdef Py_ssize_t _partition_of(self, partition, key) except -1:
        if partition is not None:
            return as_int(partition, "partition", hi=len(self._parts) - 1,
                          error=InvalidRecordError)
        if self._topic is None:
            return 0
        if key is None:
            return self._sticky  # read without the lock: a stale value is as good
        return partition_for_key(key, len(self._parts))  # the topic's rule for a key

    cdef bint _wait_for_room(self) except -1:
        """With `buffer_records` waiting: seal every open batch (the sender appends them
        oldest first) and wait until there is room; True if the sticky partition's batch
        was sealed. A future's callback runs on the sender thread and must not wait for
        it: it goes over the buffer instead."""
        if threading.current_thread() is self._sender:
            return False
        cdef bint sticky_sealed = False
        while self._waiting >= self._buffer_records:
            sticky_sealed |= self._seal_open()
            self._wait_done()
            if self._closed:
                raise self._refusal()
        return sticky_sealed

    cdef bint _seal(self, list batches) except -1:
        """Hand sealed batches to the sender. True if one is the sticky partition's: keyless
        records then move on (Kafka's sticky partitioner), once the caller has let go of
        the lock (the topic's round robin is Python code)."""
        self._ready.extend(batches)
        self._sealed += len(batches)
        self._wake_sender()
        if self._topic is None:
            return False
        cdef Py_ssize_t sticky = self._sticky
        return any((<Batch>b).partition == sticky for b in batches)

    cdef _next_sticky(self):
        self._sticky = self._topic.partition_for(None)

    cdef _wake_sender(self):
        if self._wake.locked():  # both calls under the lock: released at most once
            self._wake.release()

    cdef bint _seal_open(self) except -1:
        cdef list batches = [b for part in self._parts
                             for b in (<_Partition>part).accumulator.seal_all()]
        if not batches:
            return False
        batches.sort(key=_opening_time)
        return self._seal(batches)

    cdef _wait_done(self):
        self._done_waiters += 1
        try:
            self._done.wait()
        finally:
            self._done_waiters -= 1

    # ------------------------------------------------------------------ flush / close

    def _flush(self) -> None:
        """Return once every record sent before the call is appended or failed. Raises
        in a forked child, and once the sender thread has died (saying why)."""
        cdef bint sticky_sealed = False
        if self._forked or self._death is not None:  # a forked child takes no lock
            raise self._refusal()
        with self._lock:
            sticky_sealed = self._seal_open()
            self._wait_finished()
        if sticky_sealed:
            self._next_sticky()

    def _close(self) -> None:
        """Refuse further sends, flush, and tell the sender to stop. Raises as _flush."""
        if self._forked or self._death is not None:
            raise self._refusal()
        with self._lock:
            self._closed = True
            self._done.notify_all()  # sends blocked on a full buffer give up
            self._seal_open()
            self._wait_finished()
            self._stopping = True
            self._wake_sender()

    cdef _wait_finished(self):
        cdef Py_ssize_t target = self._sealed
        while self._finished < target:
            self._wait_done()
        if self._death is not None:  # released by _sender_died: its records failed
            raise self._refusal()

    cdef object _refusal(self):
        """The error a refused call raises: ForkedProcessError in a forked child; the
        sender's death, saying why; else "closed"."""
        if self._forked:
            return self._owner.refusal()
        if self._death is not None:
            error = KdelayError(self._death)
            error.__cause__ = self._death_cause
            return error
        return KdelayError("the producer is closed")

    # ------------------------------------------------------------------ ends

    def _sender_died(self, list held, cause) -> None:
        """The sender thread is dying of `cause` (any BaseException: a done-callback's
        sys.exit(), a MemoryError, a bug), holding the batches `held`. From here on the
        producer is closed: every future it holds fails with a KdelayError saying why, and
        every call, including flush and close, raises one (those waiting wake and raise).
        A callback that raises again meanwhile stops nothing."""
        name = type(cause).__name__
        death = (f"the producer's sender thread died of {name}: {cause}" if str(cause)
                 else f"the producer's sender thread died of {name}")
        with self._lock:
            self._death, self._death_cause = death, cause
            self._closed = True
            waiting = list(self._ready) + [b for part in self._parts
                                           for b in (<_Partition>part).accumulator.seal_all()]
            self._ready.clear()
        for batches, fate in ((held, "its batch may or may not have been appended"),
                              (waiting, "its batch was never appended")):
            for batch in batches:
                pending = [f for f in (<Batch>batch).tickets if not f.done()]
                if not pending:
                    continue
                error = KdelayError(f"{death}; {fate}")
                error.__cause__ = cause
                try:
                    fail(pending, (<Batch>batch).condition, error)
                except BaseException:  # noqa: a callback died too: fail the rest all the same
                    pass
        with self._lock:
            self._waiting = 0
            self._finished = self._sealed
            self._done.notify_all()

    def _orphan(self, list held) -> None:
        """In a forked child (kdelay.forks, before any of the child's code runs): closed
        for good, every call refused with ForkedProcessError. The futures this copy holds
        (the parent's records, which the parent appends) fail at once with it, without
        taking a lock (a parent thread may have held one at the fork) and without running
        their callbacks (the parent's, which it runs when its own copies resolve)."""
        self._forked = True
        self._closed = True
        error = self._owner.refusal()
        batches = list(held) + list(self._ready) + [
            b for part in self._parts for b in (<_Partition>part).accumulator.seal_all()]
        for batch in batches:
            abandon((<Batch>batch).tickets, error)

    # ------------------------------------------------------------------ the sender

    def _next_batches(self, double linger_s) -> list:
        """Wait for sealed batches, sealing those whose linger is up meanwhile, and take
        them all; [] once stopping with nothing left."""
        cdef list lingered, opened
        cdef bint sticky_sealed
        while True:
            sticky_sealed = False
            with self._lock:
                cutoff = monotonic() - linger_s
                lingered = [b for part in self._parts for b in
                            (<_Partition>part).accumulator.seal_opened_before(cutoff)]
                if lingered:
                    lingered.sort(key=_opening_time)
                    sticky_sealed = self._seal(lingered)
                batches = list(self._ready)
                self._ready.clear()
                stopping = self._stopping
                opened = [t for part in self._parts
                          if (t := (<_Partition>part).accumulator.oldest_opened()) is not None]
                self._sender_idle = not opened
            if sticky_sealed:
                self._next_sticky()
            if batches or stopping:
                return batches
            # a send that seals a batch or opens the first one releases _wake meanwhile
            self._wake.acquire(True, -1 if not opened else
                               max(0.0, min(opened) + linger_s - monotonic()))

    def _finished_batches(self, list batches) -> None:
        """The sender appended (or failed) `batches`: their records stop counting."""
        with self._lock:
            self._waiting -= sum(map(len, batches))
            self._finished += len(batches)
            if self._done_waiters:  # notify_all is Python code: only when needed
                self._done.notify_all()

    def _log_of(self, Py_ssize_t partition):
        return (<_Partition>self._parts[partition]).log


def _check_due(_Partition part, requested, stamp) -> None:
    """The log's rules for a record's deliverAfter, as for this record alone."""
    config = part.config
    requested_deliver_after((requested,), None, path=part.log.path,
                            delayed_delivery_enable=config.delayed_delivery_enable)
    check_delay_limit(config.max_delivery_delay_ms, requested, None, stamp)


def _alone(value, key, headers, stamp, deliver_after, config):
    """Near max_batch_bytes the codec's bound is loose: build the record's batch as the log
    would (raising what log.append would refuse it with); it then fills a batch alone."""
    build_batch(BatchColumns((value,), (key,), (headers,), (stamp,), (None,)),
                base_offset=0, now=stamp, requested=deliver_after, config=config)
    return config.max_batch_bytes
