# The accumulator's classes, declared for producer_core.pyx to call `add` at C speed.
from libc.stdint cimport int64_t, uint64_t


cdef class Batch:
    cdef readonly int partition
    cdef readonly double opened_at
    cdef readonly list values, keys, headers, stamps, tickets
    cdef readonly object condition
    cdef readonly int64_t latest, earliest_stamp
    cdef readonly uint64_t size
    cdef readonly bint asked, has_headers


cdef class PartitionAccumulator:
    cdef readonly int partition
    cdef readonly object limits
    cdef uint64_t _bucket_ms, _byte_cap
    cdef Py_ssize_t _batch_records, _max_open
    cdef int64_t _max_delay_ms
    cdef dict _open
    cdef public object spare_condition  # the next batch's, if made already

    cdef object _take_condition(self)

    cdef bint _joins(self, Batch batch, int64_t requested, bint asked, int64_t stamp,
                     uint64_t size) except -1
    cpdef tuple add(self, value, key, tuple headers, int64_t stamp, int64_t requested,
                    bint asked, uint64_t size, double now, make_ticket)
