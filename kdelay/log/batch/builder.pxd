# cython: language_level=3
from libc.stdint cimport int64_t


cdef struct Built:  # what build() says of the batch besides its bytes
    int64_t records, deliver_after, max_timestamp


cdef struct Limits:  # a LogConfig's limits on a batch, read once (limits_of)
    int64_t max_delivery_delay_ms, max_batch_bytes


cdef int limits_of(config, Limits* out) except -1
cdef bytes build(columns, int64_t base_offset, int64_t now, requested, const Limits* limits,
                 Built* out)
