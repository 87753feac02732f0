"""Zigzag varints (Kafka v2 / protobuf style), one at a time: for the per-header paths
(header blocks are coded once per distinct header set). The per-record varints of a batch
are coded by the compiled loops of record_loops.pyx."""

from __future__ import annotations


def encode_one(value: int) -> bytes:
    """The zigzag varint of one signed int64."""
    u = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def decode_one(buf, pos: int) -> tuple[int, int]:
    """(signed value, next position) of the varint at `pos`; IndexError past the end,
    ValueError for a varint over 10 bytes."""
    u = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")
    u &= 0xFFFFFFFFFFFFFFFF  # as Kafka reads a varlong: bits past 64 are dropped
    return (u >> 1) ^ -(u & 1), pos
