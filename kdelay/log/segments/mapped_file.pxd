# cython: language_level=3
from libc.stdint cimport uint8_t


cdef class MappedFile:
    cdef const uint8_t* data  # NULL once closed
    cdef readonly Py_ssize_t capacity
