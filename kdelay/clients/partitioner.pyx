# cython: language_level=3
"""Kafka's default partitioner: murmur2 of the key bytes, made positive, modulo the count.

`murmur2` follows org.apache.kafka.common.utils.Utils.murmur2 (MurmurHash2, seed
0x9747b28c, little-endian 4-byte blocks, Java's fall-through tail). Java returns a signed
int; this returns the same 32 bits as an unsigned int (as kafka-python does). The sign
does not matter to the partition, which keeps only the low 31 bits.

Compiled (Cython): a Producer hashes the key of every record it is sent, and in Python
the hash of a 16-byte key cost more than the rest of a send's bookkeeping.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t

__all__ = ["murmur2", "partition_for_key", "to_positive"]

cdef uint32_t _SEED = 0x9747B28C
cdef uint32_t _M = 0x5BD1E995
cdef int _R = 24


cdef uint32_t _murmur2(const uint8_t *data, Py_ssize_t length) noexcept:
    cdef Py_ssize_t n4 = length >> 2, i
    cdef uint32_t h = _SEED ^ <uint32_t>length, k
    for i in range(n4):  # uint32_t arithmetic wraps as Java's int does
        k = (data[4 * i] | (<uint32_t>data[4 * i + 1] << 8) | (<uint32_t>data[4 * i + 2] << 16)
             | (<uint32_t>data[4 * i + 3] << 24))
        k *= _M
        k ^= k >> _R
        k *= _M
        h = (h * _M) ^ k
    cdef Py_ssize_t tail = length & 3, rest = n4 << 2
    if tail:
        # Java's switch falls through: case 3 -> case 2 -> case 1
        if tail == 3:
            h ^= <uint32_t>data[rest + 2] << 16
        if tail >= 2:
            h ^= <uint32_t>data[rest + 1] << 8
        h ^= data[rest]
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return h


cdef uint32_t _murmur2_of(data) except? 0:
    """Of bytes directly (a Producer's keys); of any other buffer of bytes through a view."""
    if type(data) is bytes:
        return _murmur2(<const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    cdef const uint8_t[::1] view = data
    return _murmur2(&view[0] if view.shape[0] else NULL, view.shape[0])


def murmur2(data) -> int:
    """MurmurHash2 of `data` (bytes or any buffer of bytes) exactly as Kafka computes it, as
    an unsigned 32-bit int."""
    return _murmur2_of(data)


def to_positive(n: int) -> int:
    """Kafka's Utils.toPositive: drop the sign bit (not abs(), which fails on MIN_VALUE)."""
    return n & 0x7FFFFFFF


def partition_for_key(key, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record (`key`: bytes or
    any buffer of bytes)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be > 0, got {num_partitions}")
    return (_murmur2_of(key) & 0x7FFFFFFF) % num_partitions
