"""A stored batch served as a Kafka v2 batch: the header rewritten, the records as stored.

A stored batch is Kafka's v2 batch with magic 3 and an 8-byte deliverAfter at byte 43
(docs/formats.md). Served, it loses that field, gets magic 2, its batchLength less 8, a new
base offset (a delivery offset, or its own log offset on a plain topic) and the CRC-32C of
what follows the CRC, which the base offset is outside of: two slices of the stored bytes
and one CRC pass, no record touched (`as_v2`).

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
_DA_START = codec.DELIVER_AFTER_OFFSET   # 43
_DA_END = _DA_START + 8                  # 51
_CRC_START = codec.CRC_START             # 21
_EPOCH_START = codec.LOG_OVERHEAD        # 12 (partitionLeaderEpoch)
_MAGIC_AT = codec.MAGIC_OFFSET           # 16
_LAST_DELTA_AT = codec.FIELD_OFFSETS["last_offset_delta"]    # 23, before deliverAfter
_COUNT_AT = codec.FIELD_OFFSETS["record_count"] - 8            # 57
V2_HEADER_SIZE = codec.HEADER_SIZE - 8   # 61


def as_v2(stored: bytes, base_offset: int) -> list[bytes | memoryview]:
    """The pieces (to be joined) of `stored` as a v2 batch at `base_offset`."""
    view = memoryview(stored)
    crc = crc32c.crc32c(view[_DA_END:], crc32c.crc32c(view[_CRC_START:_DA_START]))
    length = len(stored) - _EPOCH_START - 8
    head = (_BASE_AND_LENGTH.pack(base_offset, length) + stored[_EPOCH_START:_MAGIC_AT]
            + b"\x02" + crc.to_bytes(4, "big"))
    return [head, view[_CRC_START:_DA_START], view[_DA_END:]]


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
    struct.pack_into(">i", header, _LAST_DELTA_AT, last)
    struct.pack_into(">i", header, _COUNT_AT, kept)
    batch = header + records
    struct.pack_into(">qi", batch, 0, base, len(batch) - _EPOCH_START)
    crc = crc32c.crc32c(memoryview(batch)[_CRC_START:])
    struct.pack_into(">I", batch, codec.CRC_OFFSET, crc)
    return bytes(batch)
