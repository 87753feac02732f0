# cython: language_level=3
from libc.stdint cimport int64_t

from kdelay.index.recent_columns cimport RecentColumns


cdef class SegmentTail:
    cdef public int fd  # the .log's descriptor (-1: closed; segment.UNOPENED: not opened yet)
    cdef public int64_t size  # bytes of the .log that hold acknowledged batches
    cdef public int64_t next_offset
    cdef public int64_t max_timestamp  # of any batch so far (-1: none)
    cdef public int64_t max_timestamp_offset  # base offset of the batch holding it (-1: none)
    cdef public object offset_index, time_index, dly_index  # (None: not loaded yet)
    cdef readonly str log_path
    cdef object _first_timestamp  # max timestamp of the first batch (None: not known yet)
    cdef int64_t _bytes_since_index_entry
    cdef RecentColumns _recent  # dly_index's recent columns, as last read (`_recent_columns`)
    cdef object _recent_of  # the dly_index they were read from
    # no longer the active segment's end (SegmentSet.roll): the writer reads it again
    cdef public bint retired

    cpdef int64_t append(self, bytes batch, int64_t header_base, int64_t last_offset_delta,
                         int64_t deliver_after, int64_t max_timestamp,
                         int64_t index_interval_bytes, bint sync=*) except -1
    cpdef int64_t append_many(self, bytes data, const int64_t[:, ::1] entries,
                              int64_t index_interval_bytes, bint sync=*,
                              object body=*) except -1
    cpdef int index_written(self, int64_t base_offset, int64_t position, int64_t size,
                            int64_t max_timestamp, int64_t index_interval_bytes) except -1
    cdef RecentColumns _recent_columns(self)
    cdef int _index(self, int64_t base, int64_t pos, int64_t size, int64_t max_timestamp,
                    int64_t interval) except -1
    cdef object _read_first_timestamp(self)
    cpdef bint rolls_before(self, int64_t incoming, int64_t max_timestamp,
                            int64_t segment_bytes, int64_t segment_ms) except -1
