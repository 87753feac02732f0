# cython: language_level=3
from libc.stdint cimport int64_t, uint8_t


cdef class Horizon:
    cdef object _map
    cdef uint8_t[::1] _page  # the map's bytes: a buffer export, released before it closes
    cdef int64_t* _words  # into _page; NULL once closed
    cdef int64_t _seq
    cdef int64_t _floor  # the floor word, as last stored
    cdef int64_t _write_floor, _write_used  # see writing()
    cdef object _write_clock

    cdef int _store(self, Py_ssize_t word, int64_t value) except -1
    cpdef int64_t start(self, int64_t floor, object clock) except? -1
    cpdef begin(self, int64_t floor)
    cpdef end(self, int64_t used)
