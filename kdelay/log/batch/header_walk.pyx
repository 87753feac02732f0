# cython: language_level=3
"""walker's compiled header walk: the batch headers of a buffer parsed into columns in one
C loop (C, built when kdelay is installed), making codec.parse_header's checks
(batch_header.parse_header, which the compiled readers share); and their CRCs checked in
another.

C checks no index by itself: the layout is checked to keep every field inside a header,
and a header is read only where a whole one lies inside the buffer."""

cimport cython
from libc.stdint cimport int64_t, uint8_t, uint32_t

from kdelay.log.batch.batch_header cimport (
    Header,
    Layout,
    kd_crc32c,
    kd_crc32c_tables,
    parse_header,
    read_layout,
)

# the rows of `out` (H_*, HEADER_ROWS) are header_walk.pxd's enum


@cython.boundscheck(False)  # the layout, `out`'s rows and `start` are checked at the top;
@cython.wraparound(False)   # a header is read only when a whole one lies in buf, by pointer
def walk_headers(const uint8_t[::1] buf, int64_t start, int64_t[:, :] out,
                 const int64_t[:] layout) -> tuple[int, int]:
    """Parse the batches lying wholly in `buf` from `start`, one after another, into the
    columns of `out` (HEADER_ROWS x capacity; at most capacity batches). Stops at the first
    batch whose header or bytes run past `buf`, or whose header fails codec.parse_header's
    checks (the same checks, held equal by a test; the caller has parse_header say what is
    wrong). `layout` is codec.HEADER_LAYOUT. Returns (batches parsed, position where it
    stopped). ValueError if `layout`, `out` or `start` are out of range."""
    cdef Layout L
    read_layout(layout, &L)
    if out.shape[0] < HEADER_ROWS or start < 0:
        raise ValueError("output rows or start out of range")
    cdef Header h
    cdef int64_t n = 0, p = start, end = buf.shape[0], capacity = out.shape[1]
    with nogil:
        while n < capacity and end - p >= L.header_size:
            if not parse_header(&buf[p], end - p, &L, &h):
                break
            out[H_REL, n] = p
            out[H_BASE_OFFSET, n] = h.base_offset
            out[H_SIZE, n] = h.size
            out[H_LAST_OFFSET_DELTA, n] = h.last_offset_delta
            out[H_BASE_TIMESTAMP, n] = h.base_timestamp
            out[H_MAX_TIMESTAMP, n] = h.max_timestamp
            out[H_DELIVER_AFTER, n] = h.deliver_after
            out[H_RECORD_COUNT, n] = h.record_count
            out[H_CRC, n] = h.crc
            n += 1
            p += h.size
    return n, p


@cython.boundscheck(False)  # every batch is checked to lie in buf before its bytes are read
@cython.wraparound(False)
def check_crcs(const uint8_t[::1] buf, const int64_t[:, :] headers, const int64_t[:] layout,
               uint8_t[:] out, bint tables=False) -> None:
    """Per batch of `headers` (walk_headers' rows), whether its CRC-32C matches the one its
    header holds, into `out` (0 or 1): the batches' bytes in C, no Python call per batch.
    `tables` takes the table method whatever the CPU (for its test). ValueError if a batch
    does not lie in `buf` or `out` is short."""
    cdef Layout L
    read_layout(layout, &L)
    cdef Py_ssize_t n = headers.shape[1], i
    if headers.shape[0] < HEADER_ROWS or out.shape[0] < n:
        raise ValueError("header rows or output out of range")
    cdef int64_t rel, size, end = buf.shape[0]
    cdef uint32_t crc
    for i in range(n):
        rel, size = headers[H_REL, i], headers[H_SIZE, i]
        if rel < 0 or size < L.crc_start or rel > end - size:
            raise ValueError("a batch does not lie in the buffer")
        if tables:
            crc = kd_crc32c_tables(&buf[rel] + L.crc_start, <size_t>(size - L.crc_start))
        else:
            crc = kd_crc32c(&buf[rel] + L.crc_start, <size_t>(size - L.crc_start))
        out[i] = crc == <uint32_t>headers[H_CRC, i]
