"""Finding partitions and segments on disk, and reading a segment's batches in chunks.

No Spark here: the data source (source.py) calls these on the driver (planning) and in the
Python workers (reading). A segment is read without the log's lock, as the offline tools
do; reading a log that another process is appending to sees some prefix of it.

Pushdown (`Bounds`): inclusive ranges on `deliver_after` and `offset`. When a segment's
persisted .dlyindex is valid for its .log (same size, checksums good) it lists every batch
with its deliverAfter, offsets, position and size, so only the batches in range are read.
Otherwise the segment's batch headers are walked (69 bytes each) and a batch out of range
is skipped without a CRC check or decode. Either way the rows returned are a superset of
what the filters keep (Spark re-applies them), never a subset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import CorruptLogError, KdelayError
from ..index.deliver_after_index import DeliverAfterIndex
from ..index.entry import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
    Entry,
)
from ..log.batch import codec, walker
from ..log.batch.entry_check import check_batch
from ..log.compaction.swap import read_marker
from ..log.segments import layout
from ..log.segments.layout import LOG_SUFFIX, PartitionDir, segment_file
from ..log.tiered.manifest import RemoteCopy
from ..log.tiered.remote_marker import read_remote_marker
from ..read_ranges import coalesce
from .columnar import Chunk
from .live import bases_between_swaps
from .segment_bytes import SegmentBytes, open_segment

CHUNK_BYTES = 8 << 20  # bytes of .log per read (and per Arrow batch, roughly)
_MAX_GAP = 64 << 10  # selected batches closer than this are read together
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
SWAP_WAIT_S = 30.0  # how long planning waits for a compaction's swap to finish


class LogChangedError(KdelayError):
    """A segment a read planned is not there as planned any more: retention deleted it, or
    compaction merged it into the segment before, or merged the segment after into it (its
    records would then be read twice). Run the read again."""


# ---------------------------------------------------------------------------- layout


def discover(path: str) -> tuple[bool, list[PartitionDir]]:
    """(topic layout?, partition directories). `path` is a partition directory (it holds
    segment files, or nothing at all) or a directory of Kafka-style `name-i` partition
    directories."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"kdelay: no such directory: {path}")
    under_root, found = layout.find_partitions(path)
    parts = [p for p in found if p.topic is not None] if under_root else []
    if not parts:
        return False, [PartitionDir(path)]
    parts.sort(key=lambda p: (p.topic, p.partition))
    return True, parts


def cleanly_closed(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, layout.CLEAN_SHUTDOWN_FILE))


# ---------------------------------------------------------------------------- bounds


@dataclass
class Bounds:
    """Inclusive ranges the pushed filters allow, plus topic/partition sets (None: any)."""

    deliver_after: tuple[int, int] = (_LONG_MIN, _LONG_MAX)
    offset: tuple[int, int] = (_LONG_MIN, _LONG_MAX)
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    empty: bool = False  # contradictory filters: nothing can match

    @property
    def restricts_batches(self) -> bool:
        return self.empty or self.deliver_after != (_LONG_MIN, _LONG_MAX) or \
            self.offset != (_LONG_MIN, _LONG_MAX)

    def narrow(self, column: str, lo: int, hi: int) -> None:
        cur = getattr(self, column)
        new = (max(cur[0], lo), min(cur[1], hi))
        if new[0] > new[1]:
            self.empty = True
        setattr(self, column, new)

    def keep_partition(self, p: PartitionDir) -> bool:
        if self.empty:
            return False
        if self.topics is not None and p.topic not in self.topics:
            return False
        return self.partitions is None or p.partition in self.partitions

    def keep_batches(self, deliver_after: np.ndarray, base_offset: np.ndarray,
                     last_offset_delta: np.ndarray) -> np.ndarray:
        """Per batch: may it hold a row the bounds allow? Vectorised."""
        dlo, dhi = self.deliver_after
        olo, ohi = self.offset
        keep = (deliver_after >= dlo) & (deliver_after <= dhi) & \
            (base_offset + last_offset_delta >= olo) & (base_offset <= ohi)
        return keep & (not self.empty)


# ---------------------------------------------------------------------------- planning


@dataclass
class SegmentPlan:
    """What the driver decided about one segment (picklable: it travels to a worker)."""

    part: PartitionDir
    base: int
    next_base: int | None  # the following segment's base offset (None: last segment)
    remote: RemoteCopy | None = None  # a remote-only segment's copy (tiered storage)

    def size(self, suffix: str = LOG_SUFFIX) -> int:
        """Bytes of the segment's .log (or of another of its files), wherever it lives;
        0 if it is gone (the reader reports it)."""
        if self.remote is not None:
            return self.remote.objects.get(suffix, (0, 0))[0]
        try:
            return os.path.getsize(segment_file(self.part.path, self.base, suffix))
        except OSError:
            return 0


def plan_segments(parts: list[PartitionDir], bounds: Bounds) -> list[SegmentPlan]:
    """Every segment that may hold a row the bounds allow. A segment is skipped whole when
    its offset range (from its name and the next segment's) misses the offset bounds, or its
    valid .dlyindex shows no batch in range."""
    plans = []
    for part in parts:
        if not bounds.keep_partition(part):
            continue
        # mid-swap, a listing may show a merged-away segment gone and its successor not
        # yet in place: records in neither
        bases = bases_between_swaps(part.path, SWAP_WAIT_S)
        for i, base in enumerate(bases):
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            plan = SegmentPlan(part, base, nxt, _remote_copy(part.path, base))
            if bounds.restricts_batches and not _segment_may_match(plan, bounds):
                continue
            plans.append(plan)
    return plans


def _remote_copy(directory: str, base: int) -> RemoteCopy | None:
    """A remote-only segment's copy (its marker without a .log), else None."""
    if os.path.exists(segment_file(directory, base, LOG_SUFFIX)):
        return None
    return read_remote_marker(directory, base)


def _segment_may_match(plan: SegmentPlan, bounds: Bounds) -> bool:
    olo, ohi = bounds.offset
    if ohi < plan.base or (plan.next_base is not None and olo >= plan.next_base):
        return False
    dlo, dhi = bounds.deliver_after
    copy = plan.remote
    if copy is not None:  # the manifest's keys: no request to the store
        if copy.max_key is None or copy.min_deliver_after is None:
            return copy.size != 0
        return copy.next_offset > olo and copy.max_key[0] >= dlo and copy.min_deliver_after <= dhi
    src = open_segment(plan.part.path, plan.base)
    if src is None:
        return True  # let the reader report it
    with src:
        idx, size = src.dly_index(), src.size
    if idx is None:
        return True
    da = idx.disk_columns[0]
    if len(da) == 0:
        return size != 0
    if idx.meta.next_offset <= olo:
        return False
    return int(da[-1]) >= dlo and int(da[0]) <= dhi


# ---------------------------------------------------------------------------- reading


@dataclass
class ScanStats:
    segment: int = 0
    log: str = ""
    mode: str = "scan"  # "index": batches chosen from the .dlyindex; "scan": headers walked
    batches_seen: int = 0  # headers looked at (or index entries)
    batches_read: int = 0  # batches whose bytes were read, CRC-checked and handed on
    bytes_read: int = 0
    records: int = 0
    error: str | None = None
    error_position: int | None = None
    notes: list[str] = field(default_factory=list)


class ReadBuffers:
    """Two buffers that .log reads go into in turn. A fresh multi-MiB buffer per read costs
    a page fault per 4 KiB (18 ms per 16 MiB segment here, against 2 ms reusing one), so
    the segments one task reads, one after another, share one ReadBuffers.

    What `read` returns stays valid until the read after next. The readers need less: a
    chunk is handed on and consumed before its generator resumes and reads again. The
    second buffer is a margin for a caller that keeps the previous chunk one step longer."""

    def __init__(self) -> None:
        self._buffers = [bytearray(), bytearray()]
        self._turn = 0

    def read(self, src: SegmentBytes, pos: int, length: int) -> memoryview:
        """`length` bytes of the segment at `pos` (fewer at its end)."""
        slot = self._turn = 1 - self._turn
        if len(self._buffers[slot]) < length:
            self._buffers[slot] = bytearray(length)
        view = memoryview(self._buffers[slot])[:length]
        return view[:src.read_into(view, pos)]


class SegmentReader:
    """Yields the wanted batches of one segment as Chunks, in file order. A framing error
    (bad magic, impossible length, truncation) ends the segment: it is recorded in
    `stats.error`/`stats.error_position` and nothing after it is yielded.

    Planned beside a compaction: the segment is read as it is when opened (one descriptor),
    so one rewritten in place since planning reads whole, without the records compaction
    removed. One deleted since, or grown by a merge past `next_base` (the next segment
    planned, whose records another task may read), raises LogChangedError."""

    def __init__(self, directory: str, base: int, bounds: Bounds | None = None, *,
                 use_index: bool = True, chunk_bytes: int = CHUNK_BYTES,
                 check_crc: bool = True, buffers: ReadBuffers | None = None,
                 next_base: int | None = None, remote: RemoteCopy | None = None):
        self.directory = directory
        self.base = base
        self.next_base = next_base
        self.remote = remote
        self.path = segment_file(directory, base, LOG_SUFFIX)  # the object's, if remote
        self.bounds = bounds if bounds is not None else Bounds()
        self.use_index = use_index
        self.chunk_bytes = chunk_bytes
        self.check_crc = check_crc  # False: crc_ok is reported True without a check
        self.stats = ScanStats(segment=base, log=self.path)
        self.buffers = buffers if buffers is not None else ReadBuffers()

    def _open(self) -> SegmentBytes:
        """The segment's bytes, local or remote (segment_bytes.py); LogChangedError if the
        segment is gone."""
        src = open_segment(self.directory, self.base, self.remote)
        if src is None:
            raise self._changed("was deleted")
        self.path = self.stats.log = src.path
        return src

    def chunks(self) -> Iterator[Chunk]:
        with self._open() as src:
            size = src.size
            if src.remote is None:
                self._check_not_merged()
            idx = None
            if self.use_index and self.bounds.restricts_batches:
                idx = src.dly_index()
            if idx is not None:
                self.stats.mode = "index"
                done: set[int] = set()
                mismatch = yield from self._from_index(src, idx, done)
                if mismatch is None:
                    return
                # the index disagrees with the log: fall back to walking every header
                self.stats.notes.append(mismatch)
                self.stats.mode = "index+scan"
                yield from self._scan(src, size, 0, skip=done)
            else:
                yield from self._scan(src, size, self._scan_start(src))

    def _changed(self, what: str) -> LogChangedError:
        return LogChangedError(f"{self.path} {what} since the read was planned (retention or "
                               f"compaction): the log changed underneath; read it again")

    def _check_not_merged(self) -> None:
        """Raise LogChangedError if the segment, as opened, holds offsets of the next
        segment planned (compaction merged that one in since; a swap puts the marker
        saying so in place before the .log)."""
        if self.next_base is None:
            return
        marker = read_marker(self.directory, self.base)
        if marker is not None and marker.end_offset > self.next_base:
            raise self._changed(f"took in the segment {self.next_base} after it")

    def _scan_start(self, src: SegmentBytes) -> int:
        """Where a header walk may start: the offset index's entry at or below the lower
        offset bound, when that index is valid."""
        olo = self.bounds.offset[0]
        if olo <= self.base:
            return 0
        oi = src.offset_index()
        if oi is None:
            return 0
        pos = oi.lookup(olo)
        return pos if 0 <= pos < src.size else 0

    def _read(self, src: SegmentBytes, pos: int, length: int) -> memoryview:
        view = self.buffers.read(src, pos, length)
        self.stats.bytes_read += len(view)
        return view

    def _fail(self, err: CorruptLogError) -> None:
        self.stats.error = err.reason  # the row says where: segment and position
        self.stats.error_position = err.position

    def _scan(self, src: SegmentBytes, size: int, start: int,
              skip: set[int] | None = None) -> Iterator[Chunk]:
        """The walker's columnar mode: every header from `start` (one compiled walk per
        read), keeping the batches in bounds (and not at a position in `skip`); a batch out
        of bounds costs its header parse only."""
        def read(pos: int, length: int) -> memoryview:
            return self._read(src, pos, length)

        skipped = np.fromiter(skip, np.int64, len(skip)) if skip else None
        try:
            for run in walker.frame_runs(read, start, size, path=self.path,
                                         chunk=self.chunk_bytes):
                h = run.headers
                self.stats.batches_seen += len(h)
                positions = run.buf_pos + h.rel
                keep = self.bounds.keep_batches(h.deliver_after, h.base_offset,
                                                h.last_offset_delta)
                if skipped is not None:
                    keep &= ~np.isin(positions, skipped)
                if keep.all():
                    yield self._take(run.buf, h, positions)
                elif keep.any():
                    yield self._take(run.buf, h.take(keep), positions[keep])
        except CorruptLogError as e:
            self._fail(e)

    def _take(self, buf: bytes | bytearray | memoryview, headers: walker.HeaderColumns,
              positions: np.ndarray) -> Chunk:
        self.stats.batches_read += len(headers)
        self.stats.records += int(headers.record_count.sum())
        crc_ok = headers.crc_valid(buf) if self.check_crc else np.ones(len(headers), bool)
        return Chunk(buf, headers, positions, crc_ok)

    def _wanted(self, da: np.ndarray, base: np.ndarray, pos: np.ndarray, lod: np.ndarray
                ) -> np.ndarray:
        """Which index entries the bounds keep, in file order."""
        order = np.flatnonzero(self.bounds.keep_batches(da, base, lod))
        return order[np.argsort(pos[order], kind="stable")]

    def index_batches(self) -> tuple[np.ndarray, ...] | None:
        """For a read that needs nothing from the .log itself (no record field, no CRC):
        the wanted batches from the segment's .dlyindex alone, in file order, as
        (deliverAfter, base offset, position, record count, size) arrays. None when the
        index is not current for the .log as it is now (the caller then reads the .log).
        O(batches), vectorised: no Python per batch."""
        if not self.use_index:
            return None
        src = open_segment(self.directory, self.base, self.remote)
        if src is None:
            return None
        with src:
            self.path = self.stats.log = src.path
            idx = src.dly_index()
            if idx is None:
                return None
            if src.remote is None:
                self._check_not_merged()
        cols = [np.asarray(c).astype(np.int64) for c in idx.disk_columns]
        da, base, pos = cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET], cols[E_POSITION]
        lod, size = cols[E_LAST_OFFSET_DELTA], cols[E_SIZE]
        order = self._wanted(da, base, pos, lod)
        counts = lod[order] + 1
        self.stats.mode = "index only"
        self.stats.batches_seen += len(da)
        self.stats.records += int(counts.sum())
        return da[order], base[order], pos[order], counts, size[order]

    def _chunk_of(self, buf: memoryview, buf_pos: int, rels: list[int],
                  headers: list[codec.BatchHeader]) -> Chunk:
        columns = walker.HeaderColumns.of(rels, headers)
        return self._take(buf, columns, buf_pos + columns.rel)

    def _from_index(self, src: SegmentBytes, idx: DeliverAfterIndex, done: set[int]):
        """Read the batches the index puts in range; returns None, or a message when the
        log disagrees with the index (the caller then walks the headers instead)."""
        cols = [np.asarray(c) for c in idx.disk_columns]
        da, base, pos = cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET], cols[E_POSITION]
        lod, size = cols[E_LAST_OFFSET_DELTA], cols[E_SIZE]
        self.stats.batches_seen += len(da)
        order = self._wanted(da, base, pos, lod)
        want = list(map(Entry._make, zip(da[order].tolist(), base[order].tolist(),
                                         pos[order].tolist(), lod[order].tolist(),
                                         size[order].tolist(), strict=True)))
        starts = pos[order]
        # one read covers a run of nearby batches, up to chunk_bytes
        for i, j in coalesce(starts, starts + size[order], max_span=self.chunk_bytes,
                             max_gap=_MAX_GAP):
            start = want[i].position
            end = want[j - 1].position + want[j - 1].size
            buf = self._read(src, start, end - start)
            rels: list[int] = []
            headers: list[codec.BatchHeader] = []
            for entry in want[i:j]:
                rel = entry.position - start
                try:  # a CRC failure is no mismatch: the Chunk reports it per batch
                    h = check_batch(buf, rel, entry, path=self.path, crc=False)
                except CorruptLogError as e:
                    if headers:
                        yield self._chunk_of(buf, start, rels, headers)
                    return str(e)
                rels.append(rel)
                headers.append(h)
                done.add(entry.position)
            if headers:
                yield self._chunk_of(buf, start, rels, headers)
        return None
