# cython: language_level=3
"""The compiled surface of int_column.pyx: recent_columns.pyx reads and appends values in
C."""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


cdef enum:
    INT32, UINT32, INT64  # how a column stores its values


@cython.final  # (its methods called directly, not through a table: the append path)
cdef class IntColumn:
    cdef readonly object a  # the numpy array of stored values; [:n] are in use
    cdef readonly Py_ssize_t n
    cdef Py_ssize_t capacity  # len(a)
    cdef readonly bint started  # a relative column has taken its first value (its base)
    cdef bint relative
    cdef int64_t _base
    cdef int kind
    cdef uint8_t* _data  # `a`'s bytes (`a` holds them while they are in use)

    cdef int _use(self, object a) except -1
    cpdef append(self, int64_t v)
    cdef void _put(self, Py_ssize_t i, int64_t x) noexcept

    cdef inline int64_t value(self, Py_ssize_t i) noexcept:
        """The value of entry i (< n), base added back. Inline: the merge of the recent
        entries' order (recent_columns.pyx) reads a few per append."""
        if self.kind == INT64:
            return (<const int64_t*>self._data)[i] + self._base
        if self.kind == UINT32:
            return (<const uint32_t*>self._data)[i] + self._base
        return (<const int32_t*>self._data)[i] + self._base
