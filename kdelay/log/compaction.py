"""Delay-aware compaction: rewrite sealed segments without their removable records.

Retention deletes whole segments from the log start, so one record due in a month pins
every segment behind it for a month. Compaction reclaims that space while keeping offsets:

- A record is *removable* once it has been due for longer than `retention_ms` (its batch's
  deliverAfter < now - retention_ms: the rule retention applies to whole segments) or it
  is cancelled (asked through a `Cancelled` hook, so this module knows nothing of how
  cancellations are stored).
- `plan` picks groups of adjacent sealed segments: each group holds at least one segment
  in which at least `min_ratio` of the bytes are removable, plus neighbours that are small
  after compaction, as long as the survivors fit in `segment_bytes`. A group is rewritten
  into one segment named by its first base offset (so the log start never moves).
- `rewrite` streams the group's .log files once, in position order: a batch with nothing
  removable is copied byte for byte (CRC checked on the way), a wholly removable batch is
  skipped, and a batch that loses some records is re-encoded as one batch per run of
  contiguous surviving offsets (same deliverAfter, base timestamp, leader epoch; records
  keep their offsets, keys, values, headers and timestamps; the CRC is computed anew).
  Splitting instead of leaving offset-delta gaps inside a batch (which Kafka's v2 format
  allows) keeps every batch reader's rule "record i of a batch has offset base + i".
  The three indexes are built for the new file as it is written; everything is fsync'd
  under `.cleaned` names; swap.install then swaps it in (see swap.py for the protocol).

Offsets may then have gaps inside a compacted segment, which carries a marker file saying
so (swap.py). Memory: one group's index entries (bounded by `segment_bytes` of survivors,
and the sources' index columns, which are memory-mapped); I/O: one sequential read of the
sources, one sequential write.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c
import numpy as np

from .. import fsio
from ..errors import CorruptLogError
from ..index.deliver_after_index import DeliverAfterIndex, Entry
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..records import CompactionResult
from . import codec, swap
from .files import DLYINDEX_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX
from .segment import LogSegment

# (first offset, end offset) -> the cancelled offsets in [first, end), sorted (any int
# sequence; numpy int64 preferred). The cancel feature answers it from its own storage.
Cancelled = Callable[[int, int], Sequence[int]]

_log = logging.getLogger("kdelay")
_READ_CHUNK = 8 << 20
_WRITE_CHUNK = 4 << 20
_MIN_RUN = 8  # adjacent whole batches copied as one slice from this many on
NO_HORIZON = -(1 << 63)  # retention_ms = -1: nothing becomes removable by age


def horizon(now: int, retention_ms: int) -> int:
    """Batches with deliverAfter below this are removable by age."""
    return NO_HORIZON if retention_ms < 0 else now - retention_ms


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

    base: np.ndarray
    pos: np.ndarray
    count: np.ndarray   # records per batch
    size: np.ndarray
    drop: np.ndarray    # bool: the whole batch is removable
    cancelled: np.ndarray  # sorted cancelled offsets among the batches not dropped
    removable_bytes: int


def batch_plan(src: Source, horizon_ms: int, cancelled: Cancelled | None) -> BatchPlan:
    """Which records of `src` are removable. O(batches) numpy work on the index columns and
    one `cancelled` query; no log data is read. A partly cancelled batch counts the
    cancelled share of its bytes."""
    da, base, pos, lod, size = src.columns
    order = np.argsort(pos, kind="stable")
    da, base, pos = da[order], base[order].astype(np.int64), pos[order].astype(np.int64)
    count = lod[order].astype(np.int64) + 1
    size = size[order].astype(np.int64)
    drop = da < horizon_ms
    removable = float(size[drop].sum())
    gone = np.empty(0, dtype=np.int64)
    if cancelled is not None and len(base):
        gone = np.unique(np.asarray(cancelled(src.base_offset, src.end_offset),
                                    dtype=np.int64))
        if len(gone):
            lo = np.searchsorted(gone, base, side="left")
            hi = np.searchsorted(gone, base + count, side="left")
            k = hi - lo  # cancelled records per batch
            keep = ~drop
            whole = keep & (k >= count)
            drop |= whole
            part = keep & ~whole & (k > 0)
            removable += float(size[whole].sum())
            removable += float((size[part] * k[part] / count[part]).sum())
    return BatchPlan(base, pos, count, size, drop, gone, int(removable))


def removable_bytes(src: Source, horizon_ms: int, cancelled: Cancelled | None) -> int:
    """What `batch_plan(...).removable_bytes` says, without sorting anything: the index is
    in deliverAfter order, so the batches removable by age are a prefix (one search); a
    `cancelled` hook adds one search per batch. O(log batches), or O(batches) with cancels.
    """
    da, base, _, lod, size = src.columns
    k = int(np.searchsorted(da, horizon_ms, side="left"))  # da < horizon: removable
    removable = float(size[:k].astype(np.int64).sum())
    if cancelled is not None and len(base) > k:
        gone = np.unique(np.asarray(cancelled(src.base_offset, src.end_offset),
                                    dtype=np.int64))
        if len(gone):
            b = base[k:].astype(np.int64)
            count = lod[k:].astype(np.int64) + 1
            n = np.searchsorted(gone, b + count) - np.searchsorted(gone, b)
            removable += float((size[k:] * np.minimum(n, count) / count).sum())
    return int(removable)


def plan(sources: list[Source], *, horizon_ms: int, min_ratio: float, segment_bytes: int,
         cancelled: Cancelled | None = None) -> list[list[Source]]:
    """Groups of adjacent sealed segments to rewrite (see the module docstring). A segment
    is dirty when at least `min_ratio` of its bytes (and at least one byte) are removable,
    small when its survivors take under a quarter of `segment_bytes`. A group is a run of
    dirty or small segments with at least one dirty one, whose survivors fit in
    `segment_bytes`. `min_ratio` <= 0 plans nothing. O(total index entries)."""
    if min_ratio <= 0:
        return []
    groups: list[list[Source]] = []
    group: list[Source] = []
    kept = 0
    dirty = False

    def close() -> None:
        if dirty and group:
            groups.append(list(group))

    for src in sources:
        removable = removable_bytes(src, horizon_ms, cancelled)
        survivors = src.size - removable
        is_dirty = removable > 0 and removable >= min_ratio * src.size
        small = survivors < segment_bytes // 4
        contiguous = not group or group[-1].end_offset == src.base_offset
        if (is_dirty or small) and contiguous and kept + survivors <= segment_bytes:
            group.append(src)
            kept += survivors
            dirty = dirty or is_dirty
            continue
        close()
        group, kept, dirty = [], 0, False
        if is_dirty or small:
            group, kept, dirty = [src], survivors, is_dirty
    close()
    return groups


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
                     DeliverAfterIndex(base), None)
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
        meta = {"log_bytes": seg.size, "next_offset": end}
        for suffix, index in ((INDEX_SUFFIX, seg.offset_index),
                              (TIMEINDEX_SUFFIX, seg.time_index),
                              (DLYINDEX_SUFFIX, seg.dly_index)):
            # each .cleaned file is fsync'd; the swap's directory fsync publishes the names
            index.persist(swap.cleaned_path(directory, base, suffix), atomic=False, **meta)
        fsio.write_new(swap.cleaned_path(directory, base, swap.MARKER_SUFFIX),
                       swap.encode_marker(swap.Marker(base, end)))
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
    base, pos, count, size = bp.base[keep], bp.pos[keep], bp.count[keep], bp.size[keep]
    gone = bp.cancelled
    if len(gone):
        partial = np.searchsorted(gone, base + count) > np.searchsorted(gone, base)
    else:
        partial = np.zeros(len(keep), dtype=bool)
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
                    _copy_one(reader, src, int(base[i]), int(pos[i]), int(count[i]),
                              int(size[i]), gone, writer, entries, seg, interval)
                continue
            k = a
            while k < b:  # pieces of at most one read chunk
                e = max(k + 1, k + int(np.searchsorted(end[k:b], pos[k] + _READ_CHUNK,
                                                       side="right")))
                if not _copy_run(reader, base[k:e], pos[k:e], count[k:e], size[k:e], writer,
                                 entries, seg, interval):
                    for i in range(k, e):  # something is off: find it batch by batch
                        _copy_one(reader, src, int(base[i]), int(pos[i]), int(count[i]),
                                  int(size[i]), gone, writer, entries, seg, interval)
                k = e
    finally:
        os.close(fd)


def _field(arr: np.ndarray, rel: np.ndarray, at: int, dtype: str) -> np.ndarray:
    """One big-endian header field of every batch starting at `rel` in `arr`."""
    width = np.dtype(dtype).itemsize
    return arr[rel[:, None] + (at + np.arange(width))].view(dtype).ravel()


def _copy_run(reader: _ChunkReader, base: np.ndarray, pos: np.ndarray, count: np.ndarray,
              size: np.ndarray, writer: _Writer, entries: list[Entry], seg: LogSegment,
              interval: int) -> bool:
    """Copy adjacent whole batches as one slice, after checking each one's header against
    the index and its CRC; False (nothing written) if any check fails."""
    start = int(pos[0])
    total = int(pos[-1] + size[-1]) - start
    buf, at = reader.get(start, total)
    arr = np.frombuffer(buf, dtype=np.uint8)
    rel = pos - start + at
    ok = ((_field(arr, rel, 0, ">i8") == base).all()
          and (_field(arr, rel, 8, ">i4").astype(np.int64) + codec.LOG_OVERHEAD == size).all()
          and (arr[rel + 16] == codec.MAGIC).all()
          and (_field(arr, rel, 23, ">i4").astype(np.int64) == count - 1).all()
          and (_field(arr, rel, 65, ">i4").astype(np.int64) == count).all())
    if not ok:
        return False
    view = memoryview(buf)
    rl, sl = rel.tolist(), size.tolist()
    crcs = [crc32c.crc32c(view[r + codec.CRC_START:r + n]) for r, n in zip(rl, sl, strict=True)]
    if crcs != _field(arr, rel, codec.CRC_OFFSET, ">u4").tolist():
        return False
    out = writer.add(view[at:at + total])
    new = list(zip(_field(arr, rel, codec.DELIVER_AFTER_OFFSET, ">i8").tolist(), base.tolist(),
                   (pos - start + out).tolist(), (count - 1).tolist(), sl, strict=True))
    entries.extend(new)
    for entry, max_ts in zip(new, _field(arr, rel, 35, ">i8").tolist(), strict=True):
        seg._index_batch(entry, max_ts, interval)
    return True


def _copy_one(reader: _ChunkReader, src: Source, b: int, pos: int, n: int, size: int,
              gone: np.ndarray, writer: _Writer, entries: list[Entry], seg: LogSegment,
              interval: int) -> None:
    """Check one batch fully (raising CorruptLogError naming the problem), then copy it,
    or re-encode it without its cancelled records."""
    buf, rel = reader.get(pos, size)
    h = codec.parse_header(buf, rel, path=src.path, file_pos=pos, available=size)
    if h.base_offset != b or h.size != size:
        raise CorruptLogError(f"batch has base offset {h.base_offset} and {h.size} "
                              f"bytes, the index says {b} and {size}", src.path, pos)
    codec.check_crc(buf, rel, h, path=src.path, file_pos=pos)
    data = bytes(memoryview(buf)[rel:rel + size])
    lo, hi = np.searchsorted(gone, [b, b + n]) if len(gone) else (0, 0)
    if lo == hi:
        _emit(writer, entries, seg, h, data, interval)
        return
    for batch in _reencode(h, data, gone[lo:hi], src.path, pos):
        _emit(writer, entries, seg, codec.parse_header(batch), batch, interval)


def _emit(writer: _Writer, entries: list[Entry], seg: LogSegment, h: codec.BatchHeader,
          data: bytes, interval: int) -> None:
    at = writer.add(data)
    entry = (h.deliver_after, h.base_offset, at, h.last_offset_delta, h.size)
    entries.append(entry)
    seg._index_batch(entry, h.max_timestamp, interval)


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


# ---------------------------------------------------------------------------- the driver


@dataclass
class Settings:
    retention_ms: int
    min_ratio: float
    segment_bytes: int
    index_interval_bytes: int


def run(directory: str, segments, lock, settings: Settings, *, now: Callable[[], int],
        cancelled: Cancelled | None = None, before_change: Callable[[], None] = lambda: None,
        after_change: Callable[[], None] = lambda: None,
        is_closed: Callable[[], bool] = lambda: False) -> CompactionResult:
    """Compact a live log's sealed segments. `segments` is its SegmentSet and `lock` the
    lock guarding it: held only to take a snapshot of the sealed segments and, per group,
    for the swap (a few renames and two directory fsyncs); planning and rewriting read
    immutable sealed files through their own descriptors while appends and fetches go on.
    A group whose segments changed meanwhile (retention deleted one) is dropped, as is one
    whose source turns out damaged (logged; verify reports the damage). Call with the
    caller's compaction lock held (one compaction at a time per log)."""
    with lock:
        if settings.min_ratio <= 0 or is_closed():
            total = sum(s.size for s in segments)
            return CompactionResult(0, total, total)
        hz = horizon(now(), settings.retention_ms)
        live = {s.base_offset: s for s in segments if s is not segments.active}
        sources = [Source.of(s) for s in live.values()]
        before = sum(s.size for s in segments)
    groups = plan(sources, horizon_ms=hz, min_ratio=settings.min_ratio,
                  segment_bytes=settings.segment_bytes, cancelled=cancelled)
    rewritten = read = written = 0
    longest = 0.0
    for group in groups:
        try:
            rw = rewrite(directory, group, horizon_ms=hz, cancelled=cancelled,
                         index_interval_bytes=settings.index_interval_bytes)
        except CorruptLogError as e:
            _log.warning("kdelay compaction: segment group at %d left as it is: %s",
                         group[0].base_offset, e)
            swap.discard_cleaned(directory, group[0].base_offset)
            continue
        with lock:
            held = time.perf_counter()
            olds = [_current(segments, live, src) for src in group]
            if is_closed() or any(o is None for o in olds):
                rw.segment.close()
                swap.discard_cleaned(directory, group[0].base_offset)
                continue
            before_change()
            try:
                others = swap.install(directory, rw.segment.base_offset, rw.replaced)
            except BaseException:
                rw.segment.close()
                raise
            segments.replace(olds, rw.segment)
            after_change()
            longest = max(longest, time.perf_counter() - held)
        # no reader can reach the old segments any more (they left the set under the lock,
        # and the fetch state that remembered them was reset): close them unlocked
        for old in olds:
            old.close()
        swap.remove_companions(directory, others)
        rewritten += len(olds)
        read += rw.bytes_before
        written += rw.segment.size
    with lock:
        after = sum(s.size for s in segments)
    return CompactionResult(rewritten, before, after, read, written, longest * 1000)


def _current(segments, live: dict, src: Source) -> LogSegment | None:
    """The segment object `src` was taken from, if it is still in the log unchanged."""
    seg = live.get(src.base_offset)
    try:
        still = segments[src.base_offset] is seg
    except KeyError:
        return None
    return seg if still and seg.size == src.size else None
