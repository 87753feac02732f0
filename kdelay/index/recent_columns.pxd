# cython: language_level=3
"""The compiled surface of recent_columns.pyx that other compiled modules call in C: the
append path (log/segments/segment_tail.pyx) adds an entry with no Python call."""

cimport cython
from libc.stdint cimport int64_t, uint8_t


cdef struct Key:
    int64_t da, seq


@cython.final  # (its methods called directly, not through a table: the append path)
cdef class IntColumn:
    cdef readonly object a  # the numpy array of stored values; [:n] are in use
    cdef readonly Py_ssize_t n
    cdef Py_ssize_t capacity  # len(a)
    cdef readonly bint started  # a relative column has taken its first value (its base)
    cdef bint relative
    cdef int64_t _base
    cdef int kind
    cdef uint8_t[::1] _bytes  # `a`'s bytes, for the C loops

    cdef int _use(self, object a) except -1
    cpdef append(self, int64_t v)
    cdef void _put(self, Py_ssize_t i, int64_t x) noexcept
    cdef int64_t value(self, Py_ssize_t i) noexcept


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

    cdef Py_ssize_t complete(self) noexcept
    cpdef add(self, int64_t da, int64_t base, int64_t pos, int64_t lod, int64_t size)
    cdef int _heap_push(self, int64_t da, Py_ssize_t seq) except -1
    cpdef merge(self)
    cdef int _explicit(self) except -1
    cdef void entry(self, Py_ssize_t s, int64_t* out) noexcept


cdef Py_ssize_t due_entries_into(RecentColumns entries, int64_t after_da, int64_t after_off,
                                 int64_t now, int64_t* buf, Py_ssize_t cap,
                                 bint* full) except -1
