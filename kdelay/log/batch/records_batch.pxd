# cython: language_level=3
cimport cython
from libc.stdint cimport int64_t

from kdelay.log.batch.batch_header cimport Layout


@cython.final
cdef class RecordsBatch:
    cdef readonly Py_ssize_t n
    cdef readonly object records  # a list or tuple of Record
    cdef list blocks  # each record's header block (None: a batch without headers)
    cdef int64_t _requested  # NONE: the batch asks for no deliverAfter
    cdef bint stamped  # some record carries a timestamp
    cdef int64_t* stamps  # each record's (NONE: none), when stamped
    cdef int64_t _earliest  # the smallest timestamp given
    cdef readonly int64_t max_timestamp  # of the last batch encoded

    cdef bytes encode_laid_out(self, int64_t now, int64_t base_offset, int64_t deliver_after,
                               const Layout* layout, bytes template)
    cdef int64_t _time_or(self, Py_ssize_t i, int64_t now) noexcept
