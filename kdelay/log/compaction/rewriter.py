"""The segment rewriter of compaction: one group of adjacent sealed segments in, one
segment out, as `.cleaned` files (swap.py installs them).

The sources are streamed once, in position order, through their own descriptors: a batch
with nothing removable is copied byte for byte (runs of adjacent ones as one slice, each
batch's header checked against the index and its CRC recomputed on the way), a wholly
removable batch is skipped, and a batch that loses some records (cancelled) is decoded and
re-encoded as one batch per run of contiguous surviving offsets: same deliverAfter, base
timestamp and leader epoch; every record keeps its offset, key, value, headers and
timestamp; a new CRC. Splitting, rather than leaving offset-delta gaps inside a batch as
Kafka's compacted v2 batches may, keeps every reader's rule "record i of a batch has offset
base + i". The three indexes are built as the new file is written. Memory: the group's
index entries; I/O: one sequential read, one sequential write, one fsync per file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ... import fsio
from ...errors import CorruptLogError
from ...index.deliver_after_index import DeliverAfterIndex
from ...index.entry import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    Entry,
)
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex
from ...read_ranges import coalesce
from ..batch import codec
from ..batch.entry_check import check_batch, check_run
from ..batch.walker import base_offsets_crc
from ..cancellation.per_batch import cancelled_per_batch
from ..segments.layout import DLYINDEX_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX
from ..segments.segment import LogSegment
from . import swap
from .removable import NO_OFFSETS, Cancelled, cancelled_between, removable

_READ_CHUNK = 8 << 20
_WRITE_CHUNK = 4 << 20
_MIN_RUN = 8  # adjacent whole batches copied as one slice from this many on


class Source(NamedTuple):
    """A sealed segment as compaction sees it: immutable files, read through its own
    descriptor (so a concurrent retention delete cannot pull them away mid-read)."""

    base_offset: int
    end_offset: int
    size: int
    path: str
    columns: list[np.ndarray]  # its DeliverAfterIndex columns (da, base, pos, lod, size)

    @classmethod
    def of(cls, seg: LogSegment) -> Source:
        return cls(seg.base_offset, seg.next_offset, seg.size, seg.log_path,
                   seg.dly_index.columns())


class BatchPlan(NamedTuple):
    """A source's batches in position order, what goes, and the removable byte count."""

    deliver_after: np.ndarray
    base: np.ndarray
    pos: np.ndarray
    records: np.ndarray  # per batch (not `count`, which would shadow tuple.count)
    size: np.ndarray
    drop: np.ndarray    # bool: the whole batch is removable
    cancelled: np.ndarray  # the source's cancelled offsets, sorted
    cancelled_count: np.ndarray  # cancelled records per batch
    removable_bytes: int


def batch_plan(src: Source, horizon_ms: int, cancelled: Cancelled | None) -> BatchPlan:
    """Which records of `src` are removable (removable.py). O(batches) numpy work on the
    index columns and one `cancelled` query; no log data is read."""
    cols = src.columns
    da, base, pos = cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET], cols[E_POSITION]
    lod, size = cols[E_LAST_OFFSET_DELTA], cols[E_SIZE]
    order = np.argsort(pos, kind="stable")
    da, base, pos = da[order], base[order].astype(np.int64), pos[order].astype(np.int64)
    count = lod[order].astype(np.int64) + 1
    size = size[order].astype(np.int64)
    gone = cancelled_between(cancelled, src.base_offset, src.end_offset) if len(base) \
        else NO_OFFSETS
    rm = removable(da, base, count, size, horizon_ms, gone)
    return BatchPlan(da, base, pos, count, size, rm.drop, gone, rm.cancelled,
                     int(rm.removable_bytes))


@dataclass
class Rewritten:
    """A group's replacement, fsync'd under `.cleaned` names and opened as a LogSegment
    (its descriptor and index maps follow the files through the renames of the swap)."""

    segment: LogSegment
    replaced: list[int]
    bytes_before: int


def rewrite(directory: str, group: list[Source], *, horizon_ms: int,
            index_interval_bytes: int, cancelled: Cancelled | None = None) -> Rewritten:
    """Write the replacement of `group` as `.cleaned` files (see the module docstring).
    Raises CorruptLogError if a source batch fails its checks (the caller then keeps the
    group as it is and calls swap.discard_cleaned). Any `.cleaned` leftovers of an earlier
    attempt are overwritten."""
    base = group[0].base_offset
    end = group[-1].end_offset
    swap.discard_cleaned(directory, base)
    fd = fsio.open_append(swap.cleaned_path(directory, base, LOG_SUFFIX))
    seg = LogSegment(directory, base, fd, 0, end, OffsetIndex(base), TimeIndex(base),
                     DeliverAfterIndex(base))
    try:
        writer = _Writer(fd)
        entries: list[Entry] = []
        for src in group:
            _copy_survivors(src, batch_plan(src, horizon_ms, cancelled), writer, entries, seg,
                            index_interval_bytes)
        writer.flush()
        fsio.fsync(fd)
        seg.size = writer.pos
        seg.dly_index = DeliverAfterIndex.from_entries(base, entries)
        seg.compacted = True
        seg.seal_time_index()
        meta = {"log_bytes": seg.size, "next_offset": end}
        for suffix, index in ((INDEX_SUFFIX, seg.offset_index),
                              (TIMEINDEX_SUFFIX, seg.time_index),
                              (DLYINDEX_SUFFIX, seg.dly_index)):
            # each .cleaned file is fsync'd; the swap's directory fsync publishes the names
            index.persist(swap.cleaned_path(directory, base, suffix), atomic=False, **meta)
        fsio.write_new(swap.cleaned_path(directory, base, swap.MARKER_SUFFIX),
                       swap.encode_marker(swap.Marker(base, end, base_offsets_crc(entries))))
    except BaseException:
        seg.close()
        raise
    return Rewritten(seg, [s.base_offset for s in group], sum(s.size for s in group))


class _Writer:
    """Sequential buffered writes to the new .log through fsio."""

    def __init__(self, fd: int):
        self.fd = fd
        self.pos = 0  # bytes accepted (written or buffered)
        self._buf = bytearray()
        self._flushed = 0

    def add(self, data) -> int:
        at = self.pos
        self._buf += data
        self.pos += len(data)
        if len(self._buf) >= _WRITE_CHUNK:
            self.flush()
        return at

    def flush(self) -> None:
        if self._buf:
            fsio.write(self.fd, bytes(self._buf), self._flushed)
            self._flushed += len(self._buf)
            self._buf.clear()


def _copy_survivors(src: Source, bp: BatchPlan, writer: _Writer, entries: list[Entry],
                    seg: LogSegment, interval: int) -> None:
    """Append the surviving records of one source to the new segment, in offset order.
    Batches kept whole are copied in runs of adjacent batches (checked per batch, with
    numpy over the run's headers and one CRC call each); a batch that loses records is
    decoded and re-encoded on its own."""
    keep = np.flatnonzero(~bp.drop)
    if not len(keep):
        return
    da, base, pos = bp.deliver_after[keep], bp.base[keep], bp.pos[keep]
    count, size = bp.records[keep], bp.size[keep]
    gone = bp.cancelled
    partial = bp.cancelled_count[keep] > 0  # (a batch cancelled whole is dropped)
    end = pos + size
    brk = np.ones(len(keep), dtype=bool)  # a run of whole, adjacent batches starts here
    brk[1:] = partial[1:] | partial[:-1] | (pos[1:] != end[:-1])
    starts = [*np.flatnonzero(brk).tolist(), len(keep)]
    fd = fsio.open_read(src.path)
    try:
        if os.fstat(fd).st_size < src.size:
            raise CorruptLogError(f"segment shorter than its index says ({src.size} bytes)",
                                  src.path)
        reader = _ChunkReader(fd)
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            if partial[a] or b - a < _MIN_RUN:  # numpy's per-call cost beats short runs
                for i in range(a, b):
                    _copy_one(reader, src, int(da[i]), int(base[i]), int(pos[i]),
                              int(count[i]), int(size[i]), gone, writer, entries, seg,
                              interval)
                continue
            # pieces of at most one read chunk
            for k, e in coalesce(pos[a:b], end[a:b], max_span=_READ_CHUNK):
                k, e = a + k, a + e
                if not _copy_run(reader, da[k:e], base[k:e], pos[k:e], count[k:e], size[k:e],
                                 writer, entries, seg, interval):
                    for i in range(k, e):  # something is off: find it batch by batch
                        _copy_one(reader, src, int(da[i]), int(base[i]), int(pos[i]),
                                  int(count[i]), int(size[i]), gone, writer, entries, seg,
                                  interval)
    finally:
        os.close(fd)


def _copy_run(reader: _ChunkReader, da: np.ndarray, base: np.ndarray, pos: np.ndarray,
              count: np.ndarray, size: np.ndarray, writer: _Writer, entries: list[Entry],
              seg: LogSegment, interval: int) -> bool:
    """Copy adjacent whole batches as one slice, after checking each one against its index
    entry (entry_check.check_run); False (nothing written) if any check fails."""
    start = int(pos[0])
    total = int(pos[-1] + size[-1]) - start
    buf, at = reader.get(start, total)
    h = check_run(buf, at, da, base, count - 1, size)
    if h is None:
        return False
    out = writer.add(memoryview(buf)[at:at + total])
    new = list(map(Entry._make, zip(h.deliver_after.tolist(), base.tolist(),
                                    (pos - start + out).tolist(), (count - 1).tolist(),
                                    size.tolist(), strict=True)))
    entries.extend(new)
    tail = seg.tail
    for entry, max_ts in zip(new, h.max_timestamp.tolist(), strict=True):
        tail.index_written(entry.base_offset, entry.position, entry.size, max_ts, interval)
    return True


def _copy_one(reader: _ChunkReader, src: Source, da: int, b: int, pos: int, n: int,
              size: int, gone: np.ndarray, writer: _Writer, entries: list[Entry],
              seg: LogSegment, interval: int) -> None:
    """Check one batch against its index entry (raising CorruptLogError naming the
    problem), then copy it, or re-encode it without its cancelled records."""
    buf, rel = reader.get(pos, size)
    h = check_batch(buf, rel, Entry(da, b, pos, n - 1, size), path=src.path)
    data = bytes(memoryview(buf)[rel:rel + size])
    start, k = cancelled_per_batch(gone, b, n) if len(gone) else (0, 0)
    if not k:
        _emit(writer, entries, seg, h, data, interval)
        return
    for batch in _reencode(h, data, gone[start:start + k], src.path, pos):
        _emit(writer, entries, seg, codec.parse_header(batch), batch, interval)


def _emit(writer: _Writer, entries: list[Entry], seg: LogSegment, h: codec.BatchHeader,
          data: bytes, interval: int) -> None:
    at = writer.add(data)
    entry = Entry(h.deliver_after, h.base_offset, at, h.last_offset_delta, h.size)
    entries.append(entry)
    seg.tail.index_written(h.base_offset, at, h.size, h.max_timestamp, interval)


def _reencode(h: codec.BatchHeader, data: bytes, gone: np.ndarray, path: str,
              pos: int) -> list[bytes]:
    """The records of batch `h` not in `gone`, as one batch per run of contiguous offsets."""
    ts, keys, values, headers = codec.decode_records(data, h, path=path, file_pos=pos)
    keep = np.ones(h.record_count, dtype=bool)
    keep[gone - h.base_offset] = False
    idx = np.flatnonzero(keep)
    # runs of consecutive indexes: split where the step is not 1
    cuts = np.flatnonzero(np.diff(idx) != 1) + 1
    out = []
    for run in np.split(idx, cuts):
        if not len(run):
            continue
        i, j = int(run[0]), int(run[-1]) + 1
        run_headers = headers[i:j]
        out.append(codec.encode_batch(
            base_offset=h.base_offset + i, base_timestamp=h.base_timestamp,
            deliver_after=h.deliver_after, keys=keys[i:j], values=values[i:j],
            timestamp_deltas=np.array(ts[i:j], dtype=np.int64) - h.base_timestamp,
            headers=run_headers if any(run_headers) else None,
            leader_epoch=h.leader_epoch))
    return out


class _ChunkReader:
    """Sequential reads in large chunks; `get` returns (buffer, offset in it) holding the
    `size` bytes at `pos` (positions must not go backwards)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = b""
        self.start = 0

    def get(self, pos: int, size: int) -> tuple[bytes, int]:
        rel = pos - self.start
        if rel < 0 or rel + size > len(self.buf):
            self.buf = fsio.pread(self.fd, max(_READ_CHUNK, size), pos)
            self.start, rel = pos, 0
            if len(self.buf) < size:
                raise CorruptLogError(f"truncated batch: {size} bytes expected, "
                                      f"{len(self.buf)} remain", None, pos)
        return self.buf, rel
