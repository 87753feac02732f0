"""murmur2 and the default partition, checked against kafka-python and Kafka's own vectors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner import murmur2 as kafka_murmur2

from kdelay.clients.partitioner import murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest.testMurmur2 (Java's signed int results)
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _signed(x: int) -> int:
    return x - (1 << 32) if x >= 1 << 31 else x


@pytest.mark.parametrize(("data", "expected"), sorted(JAVA_VECTORS.items()))
def test_java_vectors(data, expected):
    assert _signed(murmur2(data)) == expected


@pytest.mark.parametrize("n", range(0, 13))
def test_every_tail_length(n):
    # 0..12 bytes covers every tail case (0-3) with 0-3 whole blocks before it
    data = bytes(range(200, 200 + n))
    assert murmur2(data) == kafka_murmur2(data)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=300))
def test_matches_kafka_python(data):
    assert murmur2(data) == kafka_murmur2(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(1, 1000))
def test_partition_is_kafkas(key, n):
    p = partition_for_key(key, n)
    assert p == (kafka_murmur2(key) & 0x7FFFFFFF) % n
    assert 0 <= p < n


def test_high_bit_bytes_and_buffer_types():
    data = b"\xff\x80\x7f\x00\xfe"
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == kafka_murmur2(data)


def test_to_positive_is_not_abs():
    assert to_positive(-(1 << 31)) == 0  # abs() of Java's MIN_VALUE would stay negative
    assert to_positive(0xFFFFFFFF) == 0x7FFFFFFF


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
