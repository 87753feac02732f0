# cython: language_level=3
"""walker's compiled header walk: the batch headers of a buffer parsed into columns in one
C loop (C, built when kdelay is installed), making codec.parse_header's checks.

C checks no index by itself: the layout is checked to keep every field inside a header,
and a header is read only where a whole one lies inside the buffer."""

cimport cython
from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef enum:  # the rows of `out`: walker's H_* (its columnar test holds the two equal)
    H_REL, H_BASE_OFFSET, H_SIZE, H_LAST_OFFSET_DELTA, H_BASE_TIMESTAMP, H_MAX_TIMESTAMP,
    H_DELIVER_AFTER, H_RECORD_COUNT, H_CRC, HEADER_ROWS

cdef enum:
    LAYOUT_FIELDS = 13  # walker._LAYOUT's length


cdef inline int64_t _big_endian(const uint8_t* buf, int width) noexcept nogil:
    """The signed big-endian integer of `width` (1..8) bytes at buf (sign-extended in
    unsigned arithmetic: no shift of a negative number)."""
    cdef uint64_t u = 0
    cdef uint64_t sign = <uint64_t>1 << (8 * width - 1)
    cdef int k
    for k in range(width):
        u = (u << 8) | buf[k]
    return <int64_t>((u ^ sign) - sign)


@cython.boundscheck(False)  # the layout, `out`'s rows and `start` are checked at the top;
@cython.wraparound(False)   # a header is read only when a whole one lies in buf, by pointer
def walk_headers(const uint8_t[::1] buf, int64_t start, int64_t[:, :] out,
                 const int64_t[:] layout) -> tuple[int, int]:
    """Parse the batches lying wholly in `buf` from `start`, one after another, into the
    columns of `out` (HEADER_ROWS x capacity; at most capacity batches). Stops at the first
    batch whose header or bytes run past `buf`, or whose header fails codec.parse_header's
    checks (the same checks, held equal by a test; the caller has parse_header say what is
    wrong). `layout` is walker._LAYOUT. Returns (batches parsed, position where it stopped).
    ValueError if `layout`, `out` or `start` are out of range."""
    if layout.shape[0] < LAYOUT_FIELDS or out.shape[0] < HEADER_ROWS or start < 0:
        raise ValueError("a layout, output rows or start out of range")
    cdef int64_t header_size = layout[0], overhead = layout[1], min_record = layout[2]
    cdef int64_t magic = layout[3]
    cdef int64_t at_base = layout[4], at_length = layout[5], at_magic = layout[6]
    cdef int64_t at_crc = layout[7], at_lod = layout[8], at_base_ts = layout[9]
    cdef int64_t at_max_ts = layout[10], at_da = layout[11], at_count = layout[12]
    cdef int64_t widest = max(8 + max(at_base, at_base_ts, at_max_ts, at_da),
                              4 + max(at_length, at_crc, at_lod, at_count), 1 + at_magic)
    if min(at_base, at_length, at_magic, at_crc, at_lod, at_base_ts, at_max_ts, at_da,
           at_count) < 0 or widest > header_size:
        raise ValueError("a header field lies outside the header")
    cdef const uint8_t* h
    cdef int64_t base_offset, size, last_offset_delta, count
    cdef int64_t n = 0, p = start, end = buf.shape[0], capacity = out.shape[1]
    with nogil:
        while n < capacity and end - p >= header_size:
            h = &buf[p]
            base_offset = _big_endian(h + at_base, 8)
            size = _big_endian(h + at_length, 4) + overhead
            last_offset_delta = _big_endian(h + at_lod, 4)
            count = _big_endian(h + at_count, 4)
            if h[at_magic] != magic or size < header_size or size > end - p or \
                    count <= 0 or last_offset_delta != count - 1 or \
                    count * min_record > size - header_size or base_offset < 0:
                break
            out[H_REL, n] = p
            out[H_BASE_OFFSET, n] = base_offset
            out[H_SIZE, n] = size
            out[H_LAST_OFFSET_DELTA, n] = last_offset_delta
            out[H_BASE_TIMESTAMP, n] = _big_endian(h + at_base_ts, 8)
            out[H_MAX_TIMESTAMP, n] = _big_endian(h + at_max_ts, 8)
            out[H_DELIVER_AFTER, n] = _big_endian(h + at_da, 8)
            out[H_RECORD_COUNT, n] = count
            out[H_CRC, n] = _big_endian(h + at_crc, 4) & <int64_t>0xFFFFFFFF
            n += 1
            p += size
    return n, p
