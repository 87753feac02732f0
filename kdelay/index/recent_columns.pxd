# cython: language_level=3
"""The compiled surface of recent_columns.pyx that other compiled modules call in C: the
append path (log/segments/segment_tail.pyx) adds an entry with no Python call, and the
windows a fetch takes (recent_windows.pyx) read entries, the order and the tail's heap."""

cimport cython
from libc.stdint cimport int64_t, uint32_t

from kdelay.index.int_column cimport IntColumn


cdef struct Key:
    int64_t da, seq


cdef inline bint key_less(Key x, Key y) noexcept nogil:
    return x.da < y.da or (x.da == y.da and x.seq < y.seq)


cdef int compare_keys(const void* a, const void* b) noexcept nogil  # (qsort's, by key)


@cython.final
cdef class RecentColumns:
    cdef readonly IntColumn da, rel, pos, lod, size
    cdef readonly int64_t base0, next_base, end_pos
    cdef readonly object order
    cdef Py_ssize_t merged, tail_limit  # len(order); arrivals kept unmerged at most
    # the tail's arrivals as a binary min-heap by (deliverAfter, arrival), so that a fetch
    # finds the tail's due entries in O(due ones) rather than by a walk over the tail
    cdef Key* heap
    cdef Py_ssize_t heap_n, heap_cap
    # replaced by its index (DeliverAfterIndex._clear_recent): an append path that kept
    # a reference (segment_tail.pyx) reads the index's new columns instead
    cdef public bint retired

    cdef Py_ssize_t complete(self) noexcept
    cpdef add(self, int64_t da, int64_t base, int64_t pos, int64_t lod, int64_t size)
    cdef int _heap_push(self, int64_t da, Py_ssize_t seq) except -1
    cpdef merge(self)
    cdef int _explicit(self) except -1
    cdef void entry(self, Py_ssize_t s, int64_t* out) noexcept


cpdef sorted_arrivals(IntColumn da, Py_ssize_t first, Py_ssize_t end)
cdef Py_ssize_t start_rank(RecentColumns entries, const uint32_t[:] order, int64_t after_da,
                           int64_t after_off) except -1
