"""A stored batch served as a Kafka v2 batch: the header rewritten, the records as stored.

A stored batch is Kafka's v2 batch with magic 3 and an 8-byte deliverAfter at byte 43
(docs/formats.md). Served, it loses that field, gets magic 2, its batchLength less 8, a new
base offset (a delivery offset, or its own log offset on a plain topic), kdelay's own
attribute bit (codec.MORE_RUNS) cleared, and the CRC-32C of what follows the CRC, which
the base offset is outside of: two slices of the stored bytes and one CRC pass, no record
touched (`put_v2`: one copy, into the response's buffer).

Only where some of a batch's records must not be served (cancelled records take no
delivery offset) are its records re-encoded (`as_v2_only`): each kept record is copied with
its offset delta replaced, the rest of its bytes as stored.
"""

from __future__ import annotations

import struct

import crc32c

from ..log.batch import codec
from ..log.batch.varint import decode_one, encode_one

_BASE_AND_LENGTH = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_DA_START = codec.DELIVER_AFTER_OFFSET   # 43
_DA_END = _DA_START + 8                  # 51
_CRC_START = codec.CRC_START             # 21
_EPOCH_START = codec.LOG_OVERHEAD        # 12 (partitionLeaderEpoch)
_MAGIC_AT = codec.MAGIC_OFFSET           # 16
_LAST_DELTA_AT = codec.FIELD_OFFSETS["last_offset_delta"]    # 23, before deliverAfter
_COUNT_AT = codec.FIELD_OFFSETS["record_count"] - 8            # 57
V2_HEADER_SIZE = codec.HEADER_SIZE - 8   # 61
_MORE_RUNS_HIGH = codec.MORE_RUNS >> 8   # in the attributes' first (high) byte, at 21


def put_v2(out: bytearray, at: int, stored: bytes, base_offset: int) -> int:
    """Write `stored` as a v2 batch at `base_offset` into `out` from byte `at` (room for
    len(stored) - 8 bytes there); returns where it ends. One copy of its bytes."""
    view = memoryview(stored)
    head: memoryview | bytearray = view[_CRC_START:_DA_START]
    if head[0] & _MORE_RUNS_HIGH:  # kdelay's own bit: clients are not shown it
        head = bytearray(head)
        head[0] &= ~_MORE_RUNS_HIGH & 0xFF
    crc = crc32c.crc32c(view[_DA_END:], crc32c.crc32c(head))
    end = at + len(stored) - 8
    _BASE_AND_LENGTH.pack_into(out, at, base_offset, len(stored) - _EPOCH_START - 8)
    out[at + _EPOCH_START:at + _MAGIC_AT] = view[_EPOCH_START:_MAGIC_AT]
    out[at + _MAGIC_AT] = 2
    _CRC.pack_into(out, at + _MAGIC_AT + 1, crc)
    out[at + _CRC_START:at + _DA_START] = head
    out[at + _DA_START:end] = view[_DA_END:]
    return end


def v2_batches(parts: list[tuple[bytes, int | None]]) -> bytearray:
    """The v2 batches of `parts`, back to back, in one buffer allocated once: each part a
    stored batch and the base offset to serve it at (`put_v2`), or (None: as it is) a
    batch already re-encoded (`as_v2_only`)."""
    out = bytearray(sum(len(d) - 8 if base is not None else len(d) for d, base in parts))
    at = 0
    for data, base in parts:
        if base is None:
            out[at:at + len(data)] = data
            at += len(data)
        else:
            at = put_v2(out, at, data, base)
    return out


def as_v2_only(stored: bytes, delivery: dict[int, int]) -> bytes | None:
    """`stored` as a v2 batch of only the records whose log offsets `delivery` maps (to
    their delivery offsets, consecutive), the first one's delivery offset as its base; None
    when it maps none of them. The batch was checked when read (entry_check)."""
    h = codec.parse_header(stored)
    pos = codec.HEADER_SIZE
    base: int | None = None
    records = bytearray()
    kept = last = 0
    for i in range(h.record_count):
        length, body = decode_one(stored, pos)
        end = body + length
        at = delivery.get(h.base_offset + i)
        if at is not None:
            if base is None:
                base = at
            # attributes (1 byte), timestampDelta, offsetDelta, then the rest as stored
            _, delta_at = decode_one(stored, body + 1)
            _, rest = decode_one(stored, delta_at)
            record = stored[body:delta_at] + encode_one(at - base) + stored[rest:end]
            records += encode_one(len(record)) + record
            kept += 1
            last = at - base
        pos = end
    if base is None:
        return None
    header = bytearray(stored[:codec.HEADER_SIZE])
    del header[_DA_START:_DA_END]
    header[_MAGIC_AT] = 2
    header[_CRC_START] &= ~_MORE_RUNS_HIGH & 0xFF
    struct.pack_into(">i", header, _LAST_DELTA_AT, last)
    struct.pack_into(">i", header, _COUNT_AT, kept)
    batch = header + records
    struct.pack_into(">qi", batch, 0, base, len(batch) - _EPOCH_START)
    crc = crc32c.crc32c(memoryview(batch)[_CRC_START:])
    struct.pack_into(">I", batch, codec.CRC_OFFSET, crc)
    return bytes(batch)
