# cython: language_level=3
"""The header a stored batch is served with, made without reading its records.

A stored batch is Kafka's v2 batch with magic 3 and an 8-byte deliverAfter after the
header's timestamps (docs/formats.md). Served (batch_rewrite.py says what changes), the
bytes after deliverAfter go out as stored, so only the first 43 bytes are new: the base
offset, batchLength less 8, magic 2, the attributes without kdelay's MORE_RUNS bit, and
the CRC-32C of attributes onward, which now lacks deliverAfter.

That CRC comes from the stored one, already checked by the reader (entry_check), without
a second pass over the records: a CRC is linear, so with A the stored attributes up to
deliverAfter, D deliverAfter, A' the served attributes and B the rest,
    crc(A'B) = crc(ADB) ^ shift(crc(AD) ^ crc(A'), len(B))
where shift(x, n) multiplies x by x^(8n) modulo the polynomial: the CRC combine the
produce path uses (crc32c_impl.h's kd_crc32c_combine(x, 0, n)), O(log n) steps. A test
holds it equal to the CRC computed over the served bytes.

Cost per batch: two CRCs of 30 bytes, at most 64 carry-less multiplications of 32 bits,
one 43-byte bytes object."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kdelay.log.batch.batch_header cimport (
    big_endian,
    kd_crc32c,
    kd_crc32c_combine,
    put_big_endian,
)

from kdelay.log.batch import codec

cdef int64_t _AT_LENGTH = codec.FIELD_OFFSETS["batch_length"]   # 8
cdef int64_t _OVERHEAD = codec.LOG_OVERHEAD                     # 12
cdef int64_t _AT_MAGIC = codec.MAGIC_OFFSET                     # 16
cdef int64_t _AT_CRC = codec.CRC_OFFSET                         # 17
cdef int64_t _CRC_START = codec.CRC_START                       # 21
cdef int64_t _DA_START = codec.DELIVER_AFTER_OFFSET             # 43
cdef int64_t _DA_END = _DA_START + 8                            # 51
cdef uint8_t _MORE_RUNS_HIGH = codec.MORE_RUNS >> 8             # in the attributes' high byte

SERVED_HEAD = _DA_START
"""Bytes of the new header; the served batch goes on with the stored bytes from
STORED_REST (the field after deliverAfter) to its end."""
STORED_REST = _DA_END


def served_header(const uint8_t[::1] stored, int64_t base_offset) -> bytes:
    """The first SERVED_HEAD bytes of `stored` (a whole stored batch whose CRC was
    checked) served as a v2 batch at `base_offset`. ValueError for fewer bytes than a
    stored header."""
    cdef int64_t size = stored.shape[0]
    if size < codec.HEADER_SIZE:
        raise ValueError(f"a stored batch of {size} bytes is shorter than its header")
    cdef const uint8_t* s = &stored[0]
    out = PyBytes_FromStringAndSize(NULL, _DA_START)
    cdef uint8_t* h = <uint8_t*>PyBytes_AS_STRING(out)
    put_big_endian(h, 8, base_offset)
    put_big_endian(h + _AT_LENGTH, 4, size - 8 - _OVERHEAD)
    memcpy(h + _OVERHEAD, s + _OVERHEAD, <size_t>(_AT_MAGIC - _OVERHEAD))  # leader epoch
    h[_AT_MAGIC] = 2
    memcpy(h + _CRC_START, s + _CRC_START, <size_t>(_DA_START - _CRC_START))
    h[_CRC_START] &= ~_MORE_RUNS_HIGH
    cdef uint32_t stored_crc = <uint32_t>big_endian(s + _AT_CRC, 4)
    cdef uint32_t delta = kd_crc32c(s + _CRC_START, <size_t>(_DA_END - _CRC_START)) ^ \
        kd_crc32c(h + _CRC_START, <size_t>(_DA_START - _CRC_START))
    put_big_endian(h + _AT_CRC, 4,
                   stored_crc ^ kd_crc32c_combine(delta, 0, <uint64_t>(size - _DA_END)))
    return out
