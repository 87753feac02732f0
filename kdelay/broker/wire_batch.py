"""A Produce request's record batch, as a client sent it, checked and opened.

Kafka v2 batch header (61 bytes, big-endian): baseOffset, batchLength, partitionLeaderEpoch,
magic (2), crc (CRC-32C of attributes..end), attributes, lastOffsetDelta, baseTimestamp,
maxTimestamp, producerId, producerEpoch, baseSequence, records count; then the records,
compressed as the attributes' low 3 bits say (gzip 1, snappy 2, lz4 3, zstd 4; cramjam
undoes them here, so the log stores records uncompressed). The records are then checked
and their kdelay headers found by the compiled pass (log/batch/client_batch.pyx).

`open_batches(data, ...)` -> list of WireBatch (a request's records field may hold several
batches back to back). Refusals raise CorruptBatchError (a framing error, a bad CRC, a
magic other than 2, an unknown codec: CORRUPT_MESSAGE), TransactionalBatchError
(transactional or control batches: transactions are not supported), BatchTooLargeError
(over max.message.bytes: MESSAGE_TOO_LARGE) or InvalidRecordError (a bad kdelay header:
INVALID_RECORD). Cost per batch: a header unpack, one CRC pass over the records
(hardware CRC-32C; the stored batch's CRC is derived from it, not computed again), the
decompression where compressed, and the compiled pass over the records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from ..errors import CorruptBatchError, InvalidRecordError
from ..log.batch.client_batch import ClientBatch, crc32c_combine

V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
_CRC_START = 21
_CODEC_MASK = 0x07
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_XERIAL = b"\x82SNAPPY\x00"


class TransactionalBatchError(InvalidRecordError):
    """A transactional or control batch: transactions are not supported."""


class BatchTooLargeError(InvalidRecordError):
    """A batch over the topic's max.message.bytes."""


@dataclass(slots=True)
class WireBatch:
    records: ClientBatch
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    size: int   # bytes on the wire

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.record_count - 1


def open_batches(data: bytes, *, max_bytes: int, delays_allowed: bool,
                 max_delay_ms: int) -> list[WireBatch]:
    """Every batch of a Produce request's records field, checked (see the module)."""
    out = []
    pos, end = 0, len(data)
    if end == 0:
        raise CorruptBatchError("no record batch in the request")
    while pos < end:
        if end - pos < V2_HEADER_SIZE:
            raise CorruptBatchError(f"a truncated batch header ({end - pos} bytes)")
        (_, length, _, magic, crc, attributes, last_delta, base_ts, _, producer_id,
         producer_epoch, base_sequence, count) = V2_HEADER.unpack_from(data, pos)
        size = length + 12
        if magic != 2:
            raise CorruptBatchError(f"record batch magic {magic}: only v2 batches (magic 2) "
                                    f"are accepted")
        if length < V2_HEADER_SIZE - 12 or size > end - pos:
            raise CorruptBatchError(f"batch length {length} does not fit the request")
        if size > max_bytes:
            raise BatchTooLargeError(f"a batch of {size} bytes is over max.message.bytes "
                                     f"({max_bytes})")
        view = memoryview(data)[pos:pos + size]
        # the client's CRC checked as the header's carried over the records' own, which
        # the stored batch reuses (ClientBatch.build): one pass over the records
        records_crc = crc32c.crc32c(view[V2_HEADER_SIZE:])
        if crc32c_combine(crc32c.crc32c(view[_CRC_START:V2_HEADER_SIZE]), records_crc,
                          size - V2_HEADER_SIZE) != crc:
            raise CorruptBatchError("record batch CRC-32C mismatch")
        if attributes & (_TRANSACTIONAL | _CONTROL):
            raise TransactionalBatchError("transactional and control batches are not "
                                          "supported (delayed topics are not transactional)")
        if count <= 0 or last_delta != count - 1:
            raise CorruptBatchError(f"record count {count} disagrees with lastOffsetDelta "
                                    f"{last_delta}")
        codec = attributes & _CODEC_MASK
        if codec == 0:  # the request's own bytes, read where they are
            records = ClientBatch(data, count, base_ts, start=pos + V2_HEADER_SIZE,
                                  end=pos + size, delays_allowed=delays_allowed,
                                  max_delay_ms=max_delay_ms, records_crc=records_crc)
        else:
            records = ClientBatch(decompress(codec, view[V2_HEADER_SIZE:]), count, base_ts,
                                  delays_allowed=delays_allowed, max_delay_ms=max_delay_ms)
        out.append(WireBatch(records,
                             producer_id, producer_epoch, base_sequence, count, size))
        pos += size
    return out


def decompress(codec: int, body: memoryview) -> bytes:
    """The records section, uncompressed (CorruptBatchError if it does not decompress)."""
    import cramjam  # only batches that are compressed pay for loading it
    try:
        if codec == 1:
            return bytes(cramjam.gzip.decompress(body))
        if codec == 2:
            return _snappy(cramjam, bytes(body))
        if codec == 3:
            return bytes(cramjam.lz4.decompress(body))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(body))
    except Exception as e:  # cramjam raises its own DecompressionError, among others
        raise CorruptBatchError(f"the records do not decompress ({type(e).__name__}: {e})"
                                ) from None
    raise CorruptBatchError(f"unknown compression codec {codec}")


def _snappy(cramjam: object, data: bytes) -> bytes:
    """Kafka's snappy: raw snappy, or the Java client's xerial framing (a magic header,
    then blocks each preceded by its big-endian int32 length)."""
    raw = cramjam.snappy.decompress_raw  # type: ignore[attr-defined]
    if not data.startswith(_XERIAL):
        return bytes(raw(data))
    out = bytearray()
    pos = 16  # magic (8), version (4), compatible version (4)
    while pos < len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise ValueError("a truncated xerial snappy block")
        out += raw(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return bytes(out)
