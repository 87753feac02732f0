"""Batches of a .log chunk -> Arrow columns, with no Python work per record.

Spark pulls records out of a Python data source fastest as `pyarrow.RecordBatch`es, and a
reader that builds Python objects per record (as `codec.decode_records` does for the
engine's fetch path) spends most of its time there. This module decodes every batch of a
chunk of the .log at once:

1. Fields. One compiled walk (record_loops.scan_chunk, the engine decoder's record parser)
   finds every record of every batch of the chunk and its timestamp, key and value
   positions, checking every length against its record's end. Headers are no column of the
   reader: a header block is only checked to hold its count's worth of headers, so retried
   records, which carry `kdelay.attempt`, stay on this path.
2. Keys and values are copied into Arrow `binary` buffers by one more compiled pass
   (record_loops.gather_payloads: one memcpy-like loop per payload, no Python per row).

Batches this cannot handle (anything malformed) go through
`codec.decode_records`, the engine's own decoder, so the two can never disagree about
what a batch holds; one it cannot decode either becomes a single placeholder row with
`crc_valid` False.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import CorruptLogError
from ..log.batch import codec, record_loops
from ..log.batch.walker import HeaderColumns

RECORD_FIELDS: list[tuple[str, pa.DataType]] = [
    ("segment", pa.int64()),
    ("batch_base_offset", pa.int64()),
    ("position", pa.int64()),
    ("offset", pa.int64()),
    ("deliver_after", pa.int64()),
    ("timestamp", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("crc_valid", pa.bool_()),
    ("cancelled", pa.bool_()),  # withdrawn by cancel or reschedule (never delivered)
]
TOPIC_FIELDS: list[tuple[str, pa.DataType]] = [("topic", pa.string()), ("partition", pa.int32())]


class Chunk(NamedTuple):
    """A buffer of .log bytes and batches lying wholly inside it: their headers as columns
    (`rel`: where each starts in the buffer), their file positions and CRC verdicts. A
    reader may reuse the buffer once the next chunk is asked for: nothing built from a
    chunk keeps a reference to it."""

    buf: bytes | bytearray | memoryview
    batches: HeaderColumns
    positions: np.ndarray  # file position of each batch
    crc_ok: np.ndarray  # bool per batch

    @classmethod
    def parse(cls, buf, rels: Sequence[int], positions: Sequence[int] | None = None) -> Chunk:
        """The batches at `rels` in `buf` (file positions `positions`, default the rels),
        their headers parsed and CRCs checked one at a time: for a few batches (tests)."""
        headers = HeaderColumns.of(rels, [codec.parse_header(buf, r) for r in rels])
        at = headers.rel if positions is None else np.asarray(positions, dtype=np.int64)
        return cls(buf, headers, at, headers.crc_valid(buf))


PAYLOAD_COLUMNS = frozenset(("timestamp", "key", "value"))  # need the records decoded
# what a current .dlyindex alone can give, without reading the .log (no CRC: no crc_valid)
INDEX_COLUMNS = frozenset(("topic", "partition", "segment", "batch_base_offset", "position",
                           "offset", "deliver_after", "cancelled"))


def arrow_schema(with_topic: bool, columns: Sequence[str] | None = None) -> pa.Schema:
    """The reader's Arrow schema; with `columns`, only those, in that order."""
    fields = dict((TOPIC_FIELDS if with_topic else []) + RECORD_FIELDS)
    names = list(fields) if columns is None else columns
    return pa.schema([pa.field(n, fields[n], nullable=True) for n in names])


# ---------------------------------------------------------------------------- binary columns


def binary_column(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A `binary` array whose i-th value is buf[starts[i]: starts[i] + lengths[i]] (null
    where lengths[i] < 0): one compiled pass copies the payloads into Arrow's data buffer
    and writes its offsets; no Python work per value."""
    n = len(starts)
    present = lengths >= 0
    total = int(lengths[present].sum()) if n else 0
    if total >= 1 << 31:
        return pa.array([None if ln < 0 else bytes(buf[s:s + ln])  # past int32 offsets
                         for s, ln in zip(starts.tolist(), lengths.tolist(), strict=True)],
                        type=pa.large_binary()).cast(pa.binary())
    offsets = np.empty(n + 1, dtype=np.int32)
    data = np.empty(total, dtype=np.uint8)
    if record_loops.gather_payloads(buf, starts, lengths, offsets, data) != total:
        raise CorruptLogError("a record's payload lies outside its chunk")  # a bug: checked
    nulls = n - int(np.count_nonzero(present))
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)], null_count=nulls)


# ---------------------------------------------------------------------------- record fields


class _Fields(NamedTuple):
    ok: np.ndarray  # per batch
    timestamps: np.ndarray
    kpos: np.ndarray
    klen: np.ndarray
    vpos: np.ndarray
    vlen: np.ndarray


def _decode_fields(buf: np.ndarray, rel: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
                   base_ts: np.ndarray) -> _Fields:
    """Every record's timestamp and payload positions, for all the given batches in one
    compiled walk (record_loops.scan_chunk). Records of batches that fail a check carry
    zero-length payloads at position 0."""
    total = int(counts.sum())
    fields = _Fields(np.empty(len(rel), dtype=bool), *(np.empty(total, dtype=np.int64)
                                                       for _ in range(5)))
    record_loops.scan_chunk(buf, codec.HEADER_SIZE, rel, sizes, counts, base_ts,
                            fields.timestamps, fields.kpos, fields.klen, fields.vpos,
                            fields.vlen, fields.ok)
    return fields


# ---------------------------------------------------------------------------- Arrow batches


def _constants(n: int, topic: str | None, partition: int | None, segment: int) -> list:
    cols = []
    if topic is not None:
        cols.append(pa.repeat(pa.scalar(topic, pa.string()), n))
        cols.append(pa.repeat(pa.scalar(partition, pa.int32()), n))
    cols.append(pa.repeat(pa.scalar(segment, pa.int64()), n))
    return cols


def is_cancelled(offsets: np.ndarray, cancelled: np.ndarray | None) -> np.ndarray:
    """Boolean per offset: is it in the sorted `cancelled` offsets? One vectorised binary
    search (all False without cancellations)."""
    if cancelled is None or not len(cancelled):
        return np.zeros(len(offsets), dtype=bool)
    i = np.minimum(np.searchsorted(cancelled, offsets), len(cancelled) - 1)
    return cancelled[i] == offsets


def header_records(schema: pa.Schema, *, segment: int, topic: str | None,
                   partition: int | None, counts: np.ndarray,
                   base_offsets: Callable[[], np.ndarray], positions: Callable[[], np.ndarray],
                   deliver_afters: Callable[[], np.ndarray],
                   crc_ok: Callable[[], np.ndarray] | None = None,
                   cancelled: np.ndarray | None = None,
                   extra: dict[str, Callable[[], pa.Array]] | None = None) -> pa.RecordBatch:
    """One row per record of the batches described per batch (record `counts`, and
    callables giving base offsets, positions, deliverAfters, CRC verdicts: only those the
    schema asks for are computed); `extra` builds the columns that need the records
    decoded. Vectorised: no Python per batch or per record."""
    nb = len(counts)
    total = int(counts.sum())
    bidx = np.repeat(np.arange(nb), counts)

    @functools.cache  # both `offset` and `cancelled` need them
    def offset_values() -> np.ndarray:
        rstart = np.cumsum(counts) - counts
        return base_offsets()[bidx] + (np.arange(total, dtype=np.int64) - rstart[bidx])

    make = {
        "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), total),
        "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), total),
        "segment": lambda: pa.repeat(pa.scalar(segment, pa.int64()), total),
        "batch_base_offset": lambda: pa.array(base_offsets()[bidx]),
        "position": lambda: pa.array(positions()[bidx]),
        "offset": lambda: pa.array(offset_values()),
        "deliver_after": lambda: pa.array(deliver_afters()[bidx]),
        "crc_valid": lambda: pa.array(np.ones(total, dtype=bool) if crc_ok is None
                                      else crc_ok()[bidx]),
        "cancelled": lambda: pa.array(is_cancelled(offset_values(), cancelled)),
        **(extra or {}),
    }
    return pa.RecordBatch.from_arrays([make[n]() for n in schema.names], schema=schema)


def records_to_arrow(chunk: Chunk, *, segment: int, topic: str | None = None,
                     partition: int | None = None, log_path: str | None = None,
                     columns: Sequence[str] | None = None,
                     cancelled: np.ndarray | None = None) -> list[pa.RecordBatch]:
    """Arrow record batches (in the chunk's batch order) holding every record of the
    chunk's batches. With `columns`, only those columns are built, and the records are
    decoded only if `timestamp`, `key` or `value` is among them (the others come from the
    batch headers); a key or value column is built only when asked for. `cancelled`: the
    segment's cancelled offsets, sorted (the `cancelled` column). No Python per batch
    unless a batch needs the fallback."""
    h = chunk.batches
    if not len(h):
        return []
    schema = arrow_schema(topic is not None, columns)
    names = schema.names
    counts = h.record_count
    fields = None
    if PAYLOAD_COLUMNS.intersection(names):
        buf = np.frombuffer(chunk.buf, dtype=np.uint8)
        fields = _decode_fields(buf, h.rel, h.size, counts, h.base_timestamp)

    def decoded() -> _Fields:
        """The fields, decoded above whenever a payload column is asked for."""
        if fields is None:
            raise AssertionError("a payload column without its decoded fields")
        return fields

    def payload(which: str) -> pa.Array:
        f = decoded()
        pos, ln = (f.kpos, f.klen) if which == "key" else (f.vpos, f.vlen)
        return binary_column(np.frombuffer(chunk.buf, dtype=np.uint8), pos, ln)

    extra = {
        "timestamp": lambda: pa.array(decoded().timestamps),
        "key": lambda: payload("key"),
        "value": lambda: payload("value"),
    }
    whole = header_records(
        schema, segment=segment, topic=topic, partition=partition, counts=counts,
        base_offsets=lambda: h.base_offset, positions=lambda: chunk.positions,
        deliver_afters=lambda: h.deliver_after, crc_ok=lambda: chunk.crc_ok,
        cancelled=cancelled, extra=extra)
    rstart = np.cumsum(counts) - counts
    total = int(counts.sum())
    if fields is None or fields.ok.all():
        return [whole]
    # splice in the engine decoder's result for each batch the fast path refused
    out = []
    run_start = 0  # first record of the current run of fast-path batches
    for b in np.flatnonzero(~fields.ok).tolist():
        lo = int(rstart[b])
        if lo > run_start:
            out.append(whole.slice(run_start, lo - run_start))
        out.append(_fallback(chunk, b, schema, segment, topic, partition, log_path, cancelled))
        run_start = lo + int(counts[b])
    if run_start < total:
        out.append(whole.slice(run_start))
    return out


def _fallback(chunk: Chunk, b: int, schema: pa.Schema, segment: int, topic: str | None,
              partition: int | None, log_path: str | None,
              cancelled: np.ndarray | None = None) -> pa.RecordBatch:
    """Batch b of the chunk through `codec.decode_records`; a single crc_valid=False
    placeholder row (null key and value) if even that cannot decode it."""
    h = chunk.batches.header(b, chunk.buf)
    rel, file_pos = int(chunk.batches.rel[b]), int(chunk.positions[b])
    data = bytes(memoryview(chunk.buf)[rel: rel + h.size])
    try:
        ts, keys, values, _ = codec.decode_records(data, h, path=log_path, file_pos=file_pos)
        crc = bool(chunk.crc_ok[b])
    except CorruptLogError:
        ts, keys, values, crc = [h.base_timestamp], [None], [None], False
    n = len(values)
    full = arrow_schema(topic is not None)
    offsets = np.arange(h.base_offset, h.base_offset + n, dtype=np.int64)
    cols = _constants(n, topic, partition, segment) + [
        pa.repeat(pa.scalar(h.base_offset, pa.int64()), n),
        pa.repeat(pa.scalar(file_pos, pa.int64()), n),
        pa.array(offsets),
        pa.repeat(pa.scalar(h.deliver_after, pa.int64()), n),
        pa.array(ts, type=pa.int64()),
        pa.array(keys, type=pa.binary()),
        pa.array(values, type=pa.binary()),
        pa.repeat(pa.scalar(crc, pa.bool_()), n),
        pa.array(is_cancelled(offsets, cancelled)),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=full).select(schema.names)
