# cython: language_level=3
"""A batch's header in C, for the compiled readers and writers (header_walk.pyx,
batch_read.pxd, records_batch.pyx): codec.parse_header's header sanity, entry_check's
agreement with an index entry, the CRC-32C, and big-endian fields written. One definition
each, held equal to the Python rules by tests (tests/log/batch/test_walker.py,
tests/fetch/test_page_fill.py, tests/log/batch/test_records_batch.py).

The header layout comes from codec at run time (codec.HEADER_LAYOUT, read by
`read_layout`; record_loops.scan_chunk takes codec.HEADER_SIZE): the compiled code keeps
no copy of it."""

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "crc32c_impl.h":
    void kd_crc_setup() noexcept nogil
    uint32_t kd_crc32c(const uint8_t* p, size_t n) noexcept nogil
    uint32_t kd_crc32c_tables(const uint8_t* p, size_t n) noexcept nogil
    uint32_t kd_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) noexcept nogil

cdef enum:
    LAYOUT_FIELDS = 14  # codec.HEADER_LAYOUT's length


cdef struct Layout:
    # where each header field lies (codec.HEADER_LAYOUT, in its order)
    int64_t header_size, overhead, min_record, magic
    int64_t at_base, at_length, at_magic, at_crc, at_lod, at_base_ts, at_max_ts, at_da
    int64_t at_count, crc_start


cdef struct Header:
    int64_t base_offset, size, last_offset_delta, base_timestamp, max_timestamp
    int64_t deliver_after, record_count, crc


cdef inline int read_layout(const int64_t[:] layout, Layout* out) except -1:
    """codec.HEADER_LAYOUT into *out; ValueError if a field would lie outside the header."""
    if layout.shape[0] < LAYOUT_FIELDS:
        raise ValueError("a layout out of range")
    out.header_size, out.overhead, out.min_record, out.magic = (
        layout[0], layout[1], layout[2], layout[3])
    out.at_base, out.at_length, out.at_magic, out.at_crc = (
        layout[4], layout[5], layout[6], layout[7])
    out.at_lod, out.at_base_ts, out.at_max_ts, out.at_da, out.at_count, out.crc_start = (
        layout[8], layout[9], layout[10], layout[11], layout[12], layout[13])
    cdef int64_t widest = max(8 + max(out.at_base, out.at_base_ts, out.at_max_ts, out.at_da),
                              4 + max(out.at_length, out.at_crc, out.at_lod, out.at_count),
                              1 + max(out.at_magic, out.crc_start))
    if min(out.at_base, out.at_length, out.at_magic, out.at_crc, out.at_lod, out.at_base_ts,
           out.at_max_ts, out.at_da, out.at_count, out.crc_start) < 0 or \
            widest > out.header_size:
        raise ValueError("a header field lies outside the header")
    return 0


cdef inline int64_t big_endian(const uint8_t* buf, int width) noexcept nogil:
    """The signed big-endian integer of `width` (1..8) bytes at buf (sign-extended in
    unsigned arithmetic: no shift of a negative number)."""
    cdef uint64_t u = 0
    cdef uint64_t sign = <uint64_t>1 << (8 * width - 1)
    cdef int k
    for k in range(width):
        u = (u << 8) | buf[k]
    return <int64_t>((u ^ sign) - sign)


cdef inline void put_big_endian(uint8_t* buf, int width, int64_t v) noexcept nogil:
    """Write the low `width` bytes of v at buf, big-endian."""
    cdef uint64_t u = <uint64_t>v
    cdef int k
    for k in range(width - 1, -1, -1):
        buf[k] = <uint8_t>(u & 0xFF)
        u >>= 8


cdef inline bint parse_header(const uint8_t* h, int64_t available, const Layout* L,
                              Header* out) noexcept nogil:
    """codec.parse_header's checks on the header at h, its batch allowed `available` bytes
    from h: True with *out filled, or False. Reads h only when a whole header is
    available."""
    if available < L.header_size:
        return False
    out.base_offset = big_endian(h + L.at_base, 8)
    out.size = big_endian(h + L.at_length, 4) + L.overhead
    out.last_offset_delta = big_endian(h + L.at_lod, 4)
    out.record_count = big_endian(h + L.at_count, 4)
    if h[L.at_magic] != L.magic or out.size < L.header_size or out.size > available or \
            out.record_count <= 0 or out.last_offset_delta != out.record_count - 1 or \
            out.record_count * L.min_record > out.size - L.header_size or out.base_offset < 0:
        return False
    out.base_timestamp = big_endian(h + L.at_base_ts, 8)
    out.max_timestamp = big_endian(h + L.at_max_ts, 8)
    out.deliver_after = big_endian(h + L.at_da, 8)
    out.crc = big_endian(h + L.at_crc, 4) & <int64_t>0xFFFFFFFF
    return True


cdef inline bint matches_entry(const Header* h, int64_t deliver_after, int64_t base_offset,
                               int64_t last_offset_delta, int64_t size) noexcept nogil:
    """entry_check.check_batch's rule: the header agrees with its index entry on
    entry_check.CHECKED_FIELDS."""
    return (h.deliver_after == deliver_after and h.base_offset == base_offset
            and h.last_offset_delta == last_offset_delta and h.size == size)


cdef inline bint crc_ok(const uint8_t* batch, const Header* h, const Layout* L) noexcept nogil:
    """codec.crc_ok: the CRC-32C of the batch from codec.CRC_START to its end is the
    header's (h passed parse_header, so the batch is at least a header long)."""
    return kd_crc32c(batch + L.crc_start, <size_t>(h.size - L.crc_start)) == <uint32_t>h.crc


cdef inline void crc32c_into(uint8_t* batch, int64_t size, const Layout* L) noexcept nogil:
    """Write the CRC-32C of the batch of `size` bytes at `batch` (from codec.CRC_START to
    its end) into its crc field."""
    put_big_endian(batch + L.at_crc, 4,
                   kd_crc32c(batch + L.crc_start, <size_t>(size - L.crc_start)))
