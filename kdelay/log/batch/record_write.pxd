# cython: language_level=3
"""One record of a v2 records section written in C: the rule every compiled writer lays a
record out by (record_loops.encode_records, records_batch.pyx), as record_encode.py
describes it: ``[length][attributes 0][tsDelta][offsetDelta][keyLength][key]
[valueLength][value][header block]`` in zigzag varints, a null key or value as length -1."""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy


cdef inline uint64_t zigzag(int64_t v) noexcept nogil:
    """v zigzagged: 0, -1, 1, -2 ... as 0, 1, 2, 3 ... (in unsigned arithmetic: no shift of
    a negative number)."""
    return (<uint64_t>v << 1) ^ (<uint64_t>0 - <uint64_t>(v < 0))


cdef inline int varint_size(int64_t v) noexcept nogil:
    """Bytes the zigzag varint of v takes."""
    cdef uint64_t u = zigzag(v)
    cdef int s = 1
    while u >= 0x80:
        u >>= 7
        s += 1
    return s


cdef inline int64_t put_varint(uint8_t* out, int64_t p, int64_t v) noexcept nogil:
    """Write v as a zigzag varint at out[p:]; the next position."""
    cdef uint64_t u = zigzag(v)
    while u >= 0x80:
        out[p] = <uint8_t>((u & 0x7F) | 0x80)
        u >>= 7
        p += 1
    out[p] = <uint8_t>u
    return p + 1


cdef inline int64_t body_size(int64_t delta, int64_t i, int64_t kl, int64_t vl,
                              int64_t hl) noexcept nogil:
    """Bytes of record i after its length varint: attributes, tsDelta, offsetDelta, key
    length and key, value length and value, the header block of hl bytes."""
    return (1 + varint_size(delta) + varint_size(i) + varint_size(kl) + max(kl, 0)
            + varint_size(vl) + max(vl, 0) + hl)


cdef inline int64_t record_size(int64_t delta, int64_t i, int64_t kl, int64_t vl,
                                int64_t hl) noexcept nogil:
    """Bytes record i takes, its length varint included."""
    cdef int64_t body = body_size(delta, i, kl, vl, hl)
    return varint_size(body) + body


cdef inline int64_t write_record(uint8_t* out, int64_t p, int64_t i, int64_t delta,
                                 const uint8_t* key, int64_t kl, const uint8_t* value,
                                 int64_t vl, const uint8_t* block, int64_t hl) noexcept nogil:
    """Write record i at out[p:] (record_size bytes, which the caller has checked fit):
    `block` is its header block of hl bytes, NULL for none (a zero count, hl 1). Returns
    the next position."""
    p = put_varint(out, p, body_size(delta, i, kl, vl, hl))
    out[p] = 0  # attributes
    p = put_varint(out, p + 1, delta)
    p = put_varint(out, p, i)
    p = put_varint(out, p, kl)
    if kl > 0:
        memcpy(out + p, key, kl)
        p += kl
    p = put_varint(out, p, vl)
    if vl > 0:
        memcpy(out + p, value, vl)
        p += vl
    if block == NULL:
        out[p] = 0
        return p + 1
    memcpy(out + p, block, hl)
    return p + hl
