# cython: language_level=3
# The rows of walk_headers' output (one column per batch), defined once: the compiled walk
# writes them in C, and Python reads them as header_walk's ints (walker.HeaderColumns).
cpdef enum:
    H_REL, H_BASE_OFFSET, H_SIZE, H_LAST_OFFSET_DELTA, H_BASE_TIMESTAMP, H_MAX_TIMESTAMP,
    H_DELIVER_AFTER, H_RECORD_COUNT, H_CRC, HEADER_ROWS
