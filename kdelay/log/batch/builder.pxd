# cython: language_level=3
from libc.stdint cimport int64_t


cdef struct Built:  # what build() says of the batch besides its bytes
    int64_t records, deliver_after, max_timestamp


cdef bytes build(columns, int64_t base_offset, int64_t now, requested, config, Built* out)
