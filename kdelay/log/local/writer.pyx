# cython: language_level=3
"""The write path of one open log: batches appended to the active segment under the flush
policy, rolls, fsyncs, cancellations and reschedules; appends, cancels and reschedules
are published on the append horizon (append_horizon.py). The Log facade holds its lock
around every call and keeps the clock, the wake-ups of waiting fetches and the append
listeners.

A write that reads the log clock (log_clock.pyx) tells lock-free readers it is under way
before it reads it: each runs inside `horizon.writing(floor, clock)` with the log clock's
floor (its deliverAfter will be >= that), which publishes the clock it used when the write
ends.

Compiled, as are the horizon (horizon_writer.pyx), the builder (log/batch/builder.pyx)
and the segment's end (segment_tail.pyx): an append calls no Python between the log
clock and its result, unless the log is set to flush (flush_policy.py), the batch is
not a RecordsBatch, or it makes a roll or the first change after a clean open."""

from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.stdint cimport int64_t

from kdelay.log.batch.builder cimport Built, build, limits_of
from kdelay.log.local.log_clock cimport LogClock
from kdelay.log.local.horizon_writer cimport Horizon
from kdelay.log.segments.segment_tail cimport SegmentTail

from kdelay.log.cancellation import cancel_ops
from kdelay.log.local.flush_policy import FlushPolicy
from kdelay.records import AppendResult

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)

cdef type _APPEND_RESULT = AppendResult


cdef object _append_result(object base, object last, object deliver_after, object now):
    """An AppendResult, made as CPython's tuple.__new__ makes a tuple subclass's instance
    (the type's allocation of 4 items, each set), without the NamedTuple's Python-level
    __new__ or the two tuples tuple.__new__ builds first (every append). The items exist
    before the allocation, so no collection can run between it and their setting."""
    cdef object result = PyType_GenericAlloc(<PyTypeObject*>_APPEND_RESULT, 4)
    Py_INCREF(base)
    PyTuple_SET_ITEM(result, 0, base)
    Py_INCREF(last)
    PyTuple_SET_ITEM(result, 1, last)
    Py_INCREF(deliver_after)
    PyTuple_SET_ITEM(result, 2, deliver_after)
    Py_INCREF(now)
    PyTuple_SET_ITEM(result, 3, now)
    return result


def _nothing() -> None:
    pass


cdef class Writer:
    # (its fields are declared in writer.pxd)

    def __init__(self, config, segments, cancels, life, LogClock clock not None):
        self.config = config
        self._clock = clock
        self._segments = segments
        self._cancels = cancels
        self._life = life
        self.policy = FlushPolicy(config)
        self.rolled = _nothing
        self._flushes = self.policy.flushes
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._index_interval_bytes = config.index_interval_bytes
        limits_of(config, &self._limits)

    cpdef object append(self, columns, requested):
        """Encode the checked `columns` (columns.BatchColumns or a RecordsBatch) as one
        batch at the log clock now and append it; fsync'd first when the flush policy says
        the batch makes a flush due. Returns the AppendResult."""
        cdef Horizon horizon = self._horizon()
        # (as `with horizon.writing(...)`)
        cdef int64_t now = horizon.start(self._clock.floor, self._clock)
        cdef int64_t base
        cdef Built built
        cdef bint sync = False
        cdef SegmentTail active
        try:
            active = self._active()
            base = active.next_offset
            data = build(columns, base, now, requested, &self._limits, &built)
            if self._make_room(active, len(data), built.max_timestamp):
                active = self._active()  # rolled: a new segment, starting at `base`
            if self._flushes:
                sync = self.policy.due_after(built.records)
            active.append(data, base, built.records - 1, built.deliver_after,
                          built.max_timestamp, self._index_interval_bytes, sync)
        finally:
            horizon.end(now)
        if self._flushes:  # (without a flush setting, the policy has nothing to count)
            self.policy.appended(built.records)
            if sync:
                self.policy.flushed()
        # the result's ints made once each: a batch of one ends where it starts, and its
        # deliverAfter is the append time or else the int it asked for (builder.build)
        cdef object first = base, at = now, last, due  # (objects: each boxed once)
        last = first if built.records == 1 else base + built.records - 1
        if built.deliver_after == now:
            due = at
        elif type(requested) is int:
            due = requested
        else:
            due = built.deliver_after
        return _append_result(first, last, due, at)

    def append_client_batch(self, batch, int64_t spread_ms, bint log_append_time,
                            int64_t producer_id, int64_t producer_epoch,
                            int64_t base_sequence):
        """A Kafka client's batch (client_batch.ClientBatch, checked) stored at the log
        clock now as runs of consecutive offsets (ClientBatch.build), written with one
        write; fsync'd first when the flush policy says the records make a flush due.
        Returns the AppendResult of the whole: its first and last offsets, the earliest
        deliverAfter of its stored batches (when the first of them comes due), the append
        time. The stored batches go to one segment (rolled first if they would not fit,
        as a single batch's would). Cost: ClientBatch.build, one write, the index upkeep
        per stored batch."""
        cdef Horizon horizon = self._horizon()
        cdef int64_t now = horizon.start(self._clock.floor, self._clock)
        cdef int64_t base, n = batch.n
        cdef bint sync = False
        try:
            base = self._active().next_offset
            # (split: one stored batch of the records as sent is its header, then the
            # records written from where they lie, not copied)
            data, entries, body = batch.build(
                base, now, spread_ms, log_append_time=log_append_time,
                producer_id=producer_id, producer_epoch=producer_epoch,
                base_sequence=base_sequence, split=True)
            self.make_room(len(data) + (0 if body is None else len(body)),
                           int(entries[:, 5].max()))
            if self._flushes:
                sync = self.policy.due_after(n)
            self._active().append_many(data, entries, self._index_interval_bytes, sync, body)
        finally:
            horizon.end(now)
        if self._flushes:
            self.policy.appended(n)
            if sync:
                self.policy.flushed()
        return _append_result(base, base + n - 1, int(entries[:, 0].min()), now)

    cdef Horizon _horizon(self):
        if self._started_horizon is not None:  # (a lifetime starts one horizon, once)
            return self._started_horizon
        horizon = self._life.horizon
        if horizon is None:
            raise ValueError("the append horizon is not started")
        self._started_horizon = <Horizon?>horizon
        return self._started_horizon

    cdef SegmentTail _active(self):
        """The segment set's active tail: kept from one append to the next until a roll
        retires it (SegmentSet.roll), then read from the set again."""
        cdef SegmentTail tail = self._active_tail
        if tail is None or tail.retired:
            tail = self._active_tail = <SegmentTail?>self._segments.active_tail
        return tail

    def reschedule(self, int64_t offset, int64_t deliver_after):
        """cancel_ops.reschedule, then the flush policy (the copy counts as one record)."""
        with self._horizon().writing(self._clock.floor, self._clock) as now:  # as an append
            copy = cancel_ops.reschedule(self._segments, self._cancels, offset, deliver_after,
                                         now, self.config, self.make_room)
        if self.policy.appended(1):
            self.flush()
        return AppendResult(copy.base_offset, copy.base_offset, copy.deliver_after, now)

    def cancel(self, offsets) -> int:
        """cancel_ops.cancel; durable per the flush policy, counted like appended records. A
        journal grown past its threshold is checkpointed after the .log fsync (which the
        checkpoint's recovery point relies on)."""
        # a cancel only takes records due after the clock it reads: published like an
        # append's, so a lock-free reader never plans past a cancel not yet written
        with self._horizon().writing(self._clock.floor, self._clock) as now:
            n = cancel_ops.cancel(self._segments, self._cancels, offsets, now)
        if n and self.policy.appended(n):
            self.flush()
        if self._cancels.needs_checkpoint():
            self._segments.active.flush()
            self._cancels.checkpoint(everything=False)
        return n

    cpdef make_room(self, int64_t size, int64_t max_timestamp):
        """Before writing a batch: the first change removes the clean marker; roll if due."""
        self._make_room(self._active(), size, max_timestamp)

    cdef bint _make_room(self, SegmentTail active, int64_t size,
                         int64_t max_timestamp) except -1:
        """make_room, given the active segment; True if it rolled (a new one is active)."""
        if not self._marker_gone:  # (the marker never comes back while the log is open)
            if self._life.marker_present:
                self._life.mark_dirty()
            self._marker_gone = True
        if active.rolls_before(size, max_timestamp, self._segment_bytes, self._segment_ms):
            self._roll()
            return True
        return False

    def roll(self) -> None:
        """Seal the active segment if it holds anything."""
        if self._segments.active.size:
            self._life.mark_dirty()
            self._roll()

    cdef _roll(self):
        if self._cancels.dirty():  # caches written before the recovery point moves on
            self._segments.active.flush()
            self._cancels.checkpoint(everything=True)
        self._segments.roll()
        self.policy.flushed()
        self.rolled()

    def flush(self) -> None:
        self._segments.active.flush()
        self._cancels.log_synced()  # the copies of reschedules so far are durable
        self._cancels.sync()
        self.policy.flushed()
