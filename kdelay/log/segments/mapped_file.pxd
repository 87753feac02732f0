# cython: language_level=3
from libc.stdint cimport uint8_t


cdef class MappedFile:
    cdef const uint8_t* data  # NULL once closed
    cdef readonly Py_ssize_t capacity
    cdef Py_ssize_t _exports  # buffers handed out (`view`) and not yet released
    cdef const uint8_t* _unmap_later  # closed while exported: unmapped at the last release
