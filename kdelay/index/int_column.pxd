# cython: language_level=3
"""The compiled surface of int_column.pyx: recent_columns.pyx reads and appends values in
C."""

cimport cython
from libc.stdint cimport int64_t, uint8_t


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
