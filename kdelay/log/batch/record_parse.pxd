# cython: language_level=3
"""One record of a v2 records section parsed in C: the rule every compiled reader walks a
batch's records by (record_loops.pyx, batch_read.pxd). A malformed record is a negative
status, never a read outside the bytes it may span."""

from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint8_t, uint64_t

cdef enum:  # errors of a record walk (status < 0): record_loops.STATUS_MESSAGES words them
    BAD_LENGTH = -1
    BAD_TIMESTAMP_DELTA = -2
    BAD_OFFSET_DELTA = -3
    BAD_KEY_LENGTH = -4
    BAD_VALUE_LENGTH = -5
    BAD_FIELDS = -6
    NOT_FILLED = -7
    TIMESTAMP_RANGE = -8
    BAD_ARGUMENTS = -9

cdef enum:
    MIN_BODY = 6  # attributes, tsDelta, offsetDelta, keyLength, valueLength, headerCount


cdef struct Fields:
    # one record, as parse_record parses it; the header block runs from hpos to end
    int64_t end, ts, kpos, klen, vpos, vlen, hpos


cdef inline int64_t read_varint(const uint8_t* buf, int64_t p, int64_t end,
                                int64_t* value) noexcept nogil:
    """The position after the varint at p, its zigzag-decoded value in *value; -1 when it
    runs past `end` (which the caller keeps within buf) or over 10 bytes. Bits past 64 are
    dropped, as Kafka reads a varlong."""
    cdef uint64_t u = 0
    cdef uint8_t b
    cdef int k
    for k in range(10):
        if p >= end:
            return -1
        b = buf[p]
        p += 1
        u |= <uint64_t>(b & 0x7F) << (7 * k)
        if b < 0x80:
            value[0] = <int64_t>(u >> 1) ^ -<int64_t>(u & 1)
            return p
    return -1


cdef inline int parse_record(const uint8_t* buf, int64_t pos, int64_t end, int64_t i,
                             int64_t base_ts, Fields* f) noexcept nogil:
    """Parse record i at `pos` (its length varint) of a records section ending at `end`
    (within buf) into *f: 0, or an error status (< 0). The header block (count and headers)
    is at least one byte."""
    cdef int64_t length, delta, offset_delta, p
    p = read_varint(buf, pos, end, &length)
    if p < 0 or length < MIN_BODY or length > end - p:
        return BAD_LENGTH
    f.end = p + length
    p += 1  # attributes: unused in v2, ignored as Kafka does
    p = read_varint(buf, p, f.end, &delta)
    if p < 0:
        return BAD_TIMESTAMP_DELTA
    if (delta > 0 and base_ts > INT64_MAX - delta) or (
            delta < 0 and base_ts < INT64_MIN - delta):
        return TIMESTAMP_RANGE
    f.ts = base_ts + delta
    p = read_varint(buf, p, f.end, &offset_delta)
    if p < 0 or offset_delta != i:
        return BAD_OFFSET_DELTA
    f.kpos = read_varint(buf, p, f.end, &f.klen)
    if f.kpos < 0 or f.klen < -1 or f.klen > f.end - f.kpos:
        return BAD_KEY_LENGTH
    f.vpos = read_varint(buf, f.kpos + max(f.klen, 0), f.end, &f.vlen)
    if f.vpos < 0 or f.vlen < -1 or f.vlen > f.end - f.vpos:
        return BAD_VALUE_LENGTH
    f.hpos = f.vpos + max(f.vlen, 0)
    if f.hpos >= f.end:  # no room for the header count
        return BAD_FIELDS
    return 0


cdef inline bint has_headers(const uint8_t* buf, const Fields* f) noexcept nogil:
    """Whether the record's header block is anything but a zero count (b"\\x00")."""
    return f.hpos + 1 != f.end or buf[f.hpos] != 0
