# cython: language_level=3
from libc.stdint cimport int64_t


cpdef build_batch(columns, int64_t base_offset, int64_t now, requested, config)
