# cython: language_level=3
"""The compiled surface of writer.pyx that the facade's append (facade_calls.pyx)
calls in C."""

from libc.stdint cimport int64_t

from kdelay.log.batch.builder cimport Limits
from kdelay.log.local.horizon_writer cimport Horizon
from kdelay.log.local.log_clock cimport LogClock
from kdelay.log.segments.segment_tail cimport SegmentTail


cdef class Writer:
    cdef readonly object config
    cdef readonly object policy  # flush_policy.FlushPolicy
    cdef public object rolled  # called after every roll (wakes the remote sync)
    cdef object _segments, _cancels, _life
    cdef LogClock _clock
    cdef bint _flushes  # the policy flushes on its own (else no decision per append)
    cdef bint _marker_gone  # the clean-shutdown marker is known removed (see _make_room)
    cdef int64_t _segment_bytes, _segment_ms, _index_interval_bytes
    cdef Limits _limits  # the config's limits on a batch
    cdef Horizon _started_horizon  # the lifetime's, once started (see _horizon)
    cdef SegmentTail _active_tail  # the segment set's, until a roll retires it (_active)

    cpdef object append(self, columns, requested)
    cpdef make_room(self, int64_t size, int64_t max_timestamp)
    cdef Horizon _horizon(self)
    cdef SegmentTail _active(self)
    cdef bint _make_room(self, SegmentTail active, int64_t size,
                         int64_t max_timestamp) except -1
    cdef _roll(self)
