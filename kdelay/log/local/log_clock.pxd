# cython: language_level=3
from libc.stdint cimport int64_t


cdef class LogClock:
    cdef object _read  # the clock the log was opened with
    cdef public int64_t floor  # the largest reading handed out (never lowered)

    cpdef int64_t now(self) except? -1
