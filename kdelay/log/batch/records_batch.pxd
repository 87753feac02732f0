# cython: language_level=3
cimport cython
from libc.stdint cimport int64_t

from kdelay.log.batch.batch_header cimport Layout


cdef enum:
    FEW = 8  # records whose timestamps a RecordsBatch holds in itself


@cython.final
cdef class RecordsBatch:
    cdef readonly Py_ssize_t n
    cdef readonly object records  # a list or tuple of Record
    cdef list blocks  # each record's header block (None: a batch without headers)
    cdef int64_t _requested  # NONE: the batch asks for no deliverAfter
    cdef object _requested_int  # the same as the int given (None: none)
    cdef bint stamped  # some record carries a timestamp
    cdef int64_t* stamps  # each record's (NONE: none), when stamped
    cdef int64_t few_stamps[FEW]  # `stamps` of a batch of up to FEW records (no allocation)
    cdef int64_t _earliest  # the smallest timestamp given
    cdef readonly int64_t max_timestamp  # of the last batch encoded

    cdef bytes encode_laid_out(self, int64_t now, int64_t base_offset, int64_t deliver_after,
                               const Layout* layout, bytes template)
    cdef int64_t _time_or(self, Py_ssize_t i, int64_t now) noexcept


cdef RecordsBatch records_batch_of(records, deliver_after, bint delays_allowed)


cdef inline object requested_of(RecordsBatch batch):
    """RecordsBatch.requested, read in C: the deliverAfter the batch asks for (None: none;
    asked-for ones are >= 0), the int it was given as (no new int object per append)."""
    return batch._requested_int
