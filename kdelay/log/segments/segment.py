"""LogSegment: one .log file of batches and its three indexes, named by base offset.

The .log is append-only. Indexes of the active segment grow in memory; `persist_indexes`
writes them atomically (on roll and on clean close) and re-maps them. A segment whose
persisted indexes are missing, stale or corrupt is rebuilt from a scan of its .log.

After a clean close a sealed segment opens from the segment summary (segment_summary.py)
with none of its indexes read: each loads on first use (log/local/deferred_indexes.py), with
every check a load makes, and what the fetch plans by (its end offset, smallest
deliverAfter, largest key, largest timestamp) comes from the summary until then.

A sealed segment rewritten by compaction (`compacted`, marked on disk by its `.compacted`
file, see swap.py) may have offset gaps between its batches: its records lie in
[base_offset, next_offset) but not every offset there exists. Offsets inside every batch
stay contiguous.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from ... import fsio
from ...errors import CorruptLogError, IndexFileError
from ...index.deliver_after_index import DeliverAfterIndex
from ...index.entry import Entry
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex
from ..batch import codec
from ..batch.entry_check import check_batch
from ..batch.walker import (
    ScanResult,
    base_offsets_crc,
    iter_headers,
    scan_log,
    unfinished_client_batch,
)
from .layout import (
    CANCEL_SUFFIXES,
    COMPANION_SUFFIXES,
    DLYINDEX_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    segment_file,
    segment_name,
)
from .mapped_file import MappedFile
from .offset_lookup import OffsetLookup
from .segment_summary import SegmentSummary
from .segment_tail import SegmentTail, TailField

# a mapping reaches this far past the file's end, so the active segment grows into it
_MAP_HEADROOM = 1 << 20
UNOPENED = -2  # the descriptor of a .log a clean open has not opened yet (see `fd`)
_opening = threading.Lock()  # one thread opens a deferred .log


def _whole_client_batches(fd: int, path: str, result: ScanResult) -> ScanResult:
    """`result` without the runs of a client batch whose last run is missing (a torn write
    of an unacknowledged append; walker.unfinished_client_batch), as if the scan had
    stopped where that client batch begins."""
    cut = unfinished_client_batch(fd, result.entries)
    if cut is None:
        return result
    first = result.entries[cut]
    return ScanResult(result.entries[:cut], result.max_timestamps[:cut], first.position,
                      first.base_offset, result.error or CorruptLogError(
                          f"the last client batch (from offset {first.base_offset}) lacks "
                          f"its last run", path, first.position))


class LogSegment(OffsetLookup):
    """A segment: its files, loading and recovery, and reads (its end, where appends are
    written and indexed: `tail`, a SegmentTail; finding a batch by offset: OffsetLookup,
    shared with remote segments).

    Every segment owns a tail; the active one's grows (the writer appends through
    `SegmentSet.active_tail`), a sealed one's only holds where the segment ends. The
    segment reads its size, end offset, largest timestamp and indexes from it."""

    # the tail's fields, read through the segment (compiled descriptors: no Python frame,
    # ~15 ns above reading the tail's own field); the indexes are loaded on first use
    # after a clean open
    size: TailField[int] = TailField("size")  # bytes of the .log holding acknowledged batches
    next_offset: TailField[int] = TailField("next_offset")
    max_timestamp: TailField[int] = TailField("max_timestamp")  # -1: none
    # the base offset of the batch holding it (-1: unknown)
    max_timestamp_offset: TailField[int] = TailField("max_timestamp_offset")
    offset_index: TailField[OffsetIndex] = TailField("offset_index", INDEX_SUFFIX)
    time_index: TailField[TimeIndex] = TailField("time_index", TIMEINDEX_SUFFIX)
    dly_index: TailField[DeliverAfterIndex] = TailField("dly_index", DLYINDEX_SUFFIX)

    @property
    def fd(self) -> int:
        """The .log's descriptor (-1: closed). A segment a clean open took from the
        summary opens its .log on first use; if it is not the size the clean close left,
        its indexes are rebuilt from it then, as an open would (CorruptLogError if it holds
        keys the clean close did not record)."""
        fd = self.tail.fd
        return self._open_log() if fd == UNOPENED else fd

    @fd.setter
    def fd(self, fd: int) -> None:
        self.tail.fd = fd

    @property
    def closed(self) -> bool:
        return self.tail.fd == -1

    @property
    def open_fd(self) -> int:
        """The .log's descriptor if it is open, else -1 (never opens it)."""
        fd = self.tail.fd
        return fd if fd >= 0 else -1

    def _open_log(self) -> int:
        tail = self.tail
        with _opening:
            fd = tail.fd
            if fd != UNOPENED:
                return fd
            fd = os.open(self.log_path, os.O_RDWR | fsio.O_BINARY)
            size = os.fstat(fd).st_size
            tail.fd = fd
            if size != self.size:  # changed behind the clean close: rebuild, as an open would
                try:
                    if self._deferred is None:
                        raise CorruptLogError(f"{size} bytes, where the clean close left "
                                              f"{self.size}", self.log_path)
                    self._deferred.log_changed(self, size)
                except BaseException:
                    tail.fd = UNOPENED  # every read reaching it fails again
                    os.close(fd)
                    raise
            return fd

    def __init__(self, directory: str, base_offset: int, fd: int, size: int, next_offset: int,
                 offset_index: OffsetIndex | None, time_index: TimeIndex | None,
                 dly_index: DeliverAfterIndex | None, summary: SegmentSummary | None = None):
        self.directory = directory
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX)
        self.base_offset = base_offset
        # (indexes None: deferred, loaded on first use)
        self.tail = SegmentTail(self.log_path, fd, size, next_offset, offset_index,
                                time_index, dly_index)
        # (dly_index.generation, min_deliver_after): see min_deliver_after
        self._min_deliver_after: tuple[int, int | None] = (0, None)
        # what a clean close recorded (None: the indexes were loaded at open), and what
        # loads the indexes not loaded yet (log/local/deferred_indexes.py; None: all)
        self.summary = summary
        self._deferred: Any = None
        # the largest timestamp: a sealed segment's is its time index's last entry (see
        # seal_time_index) or the summary's, the active one's kept by every append
        if summary is not None:
            self.tail.max_timestamp = summary.max_timestamp
        else:
            assert time_index is not None  # loaded, or built afresh
            last_key = time_index.last_key()
            last = None if last_key is None else time_index.floor(last_key)
            if last is not None:
                self.tail.max_timestamp, self.tail.max_timestamp_offset = last
        self.compacted = False  # may have offset gaps (set by the loader and compaction)
        # tiered storage: the segment's committed copy in the object store
        # (kdelay.log.tiered.manifest.RemoteCopy, a room above this one: not imported),
        # None until copied
        self.remote: Any = None
        self._mapped: MappedFile | None = None

    @property
    def max_key(self) -> tuple[int, int] | None:
        """The largest (deliverAfter, offset) of any record here (None: no batch)."""
        if self.summary is not None:  # sealed: what the summary says, checked on loading
            return self.summary.max_key
        return self.dly_index.max_key()

    @property
    def min_deliver_after(self) -> int | None:
        """The smallest deliverAfter of any record here (None: no batch). Worked out once
        per persisted index (a generation), so a sealed segment answers from memory, as a
        remote one does from its manifest; entries appended since change it at once."""
        if self.summary is not None:  # sealed: what the summary says, checked on loading
            return self.summary.min_deliver_after
        idx = self.dly_index
        if idx.has_recent:
            return idx.min_deliver_after()
        if self._min_deliver_after[0] != idx.generation:
            self._min_deliver_after = (idx.generation, idx.min_deliver_after())
        return self._min_deliver_after[1]

    # ------------------------------------------------------------------ paths

    def path(self, suffix: str) -> str:
        return segment_file(self.directory, self.base_offset, suffix)

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, directory: str, base_offset: int) -> LogSegment:
        """A new, empty segment. If the file cannot be made empty, it is removed again
        (best effort; the loader also drops an empty .log that overlaps its predecessor)."""
        for suffix in CANCEL_SUFFIXES:
            # a new segment has no cancellations: never inherit those of an earlier one with
            # this base offset (cut off by recovery); durable with the fsync_dir that makes
            # the new .log durable
            fsio.unlink(segment_file(directory, base_offset, suffix))
        path = os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX)
        fd = fsio.open_append(path)
        try:
            fsio.truncate(fd, 0)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                fsio.unlink(path)
            raise
        return cls(directory, base_offset, fd, 0, base_offset, OffsetIndex(base_offset),
                   TimeIndex(base_offset), DeliverAfterIndex(base_offset))

    @classmethod
    def load(cls, directory: str, base_offset: int) -> LogSegment:
        """Open with its persisted indexes, reading no log data beyond the first header.
        Raises IndexFileError if any index is missing or stale, or its header, chunk table,
        first or last chunk corrupt; its other chunks are checked as reads reach them
        (index/chunk_checks.py)."""
        fd = fsio.open_append(os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX))
        try:
            size = os.fstat(fd).st_size
            name = os.path.join(directory, segment_name(base_offset))
            kw: dict[str, Any] = {"base_offset": base_offset, "log_bytes": size, "lazy": True}
            oi = OffsetIndex.load(name + INDEX_SUFFIX, **kw)
            ti = TimeIndex.load(name + TIMEINDEX_SUFFIX, **kw)
            di = DeliverAfterIndex.load(name + DLYINDEX_SUFFIX, **kw)
            next_offset = di.meta.next_offset
            if not (oi.meta.next_offset == ti.meta.next_offset == next_offset):
                raise IndexFileError(f"{name}: indexes disagree on the segment's end offset")
            if (len(di) == 0) != (size == 0) or next_offset < base_offset:
                raise IndexFileError(f"{name}: index does not match its log")
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, base_offset, fd, size, next_offset, oi, ti, di)

    @classmethod
    def deferred_load(cls, directory: str, summary: SegmentSummary, loader) -> LogSegment:
        """A sealed segment as a clean close summarised it, touching none of its files:
        its .log opens on first use (`fd`), and `loader` (log/local/deferred_indexes.py) loads
        each index on first use."""
        seg = cls(directory, summary.base_offset, UNOPENED, summary.log_bytes,
                  summary.next_offset, None, None, None, summary)
        seg.compacted = summary.compacted
        seg._deferred = loader
        return seg

    @classmethod
    def recover(cls, directory: str, base_offset: int, *, index_interval_bytes: int,
                check_crc: bool, truncate: bool, compacted_end: int | None = None,
                bases_crc: int | None = None) -> tuple[LogSegment, CorruptLogError | None]:
        """Rebuild every index from a scan of the .log. With `truncate`, a torn or corrupt
        tail is cut off (the segment was not known to be flushed), and with it the runs of a
        client batch whose last run is missing (codec.MORE_RUNS); otherwise indexing stops
        at the damage and the error is returned for the caller to report. `compacted_end`:
        the segment is a compacted one ending there (offset gaps allowed); `bases_crc`: its
        marker's checksum of the batches' base offsets. If the scan stops short or its base
        offsets do not match that checksum, some base offset may be damaged and no scan can
        tell which, so nothing of the segment is indexed (and nothing cut off): it reads as
        empty, and the error says why."""
        path = os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX)
        fd = fsio.open_append(path)
        try:
            # Not truncating (a flushed segment): index a batch that fails only its CRC, so
            # that reads reaching it raise CorruptLogError and the intact batches behind it
            # stay fetchable, rather than silently dropping them from the index.
            result = scan_log(fd, path, base_offset, check_crc=check_crc,
                              index_bad_crc=not truncate, gaps=compacted_end is not None)
            if compacted_end is not None and result.next_offset > compacted_end:
                raise CorruptLogError(f"compacted segment holds offsets up to "
                                      f"{result.next_offset - 1}, its marker says it ends at "
                                      f"{compacted_end}", path)
            size = os.fstat(fd).st_size
            if bases_crc is not None and (result.valid_bytes < size or
                                          base_offsets_crc(result.entries) != bases_crc):
                error = result.error or CorruptLogError(
                    "batch base offsets differ from those compaction wrote (checksum in the "
                    "compaction marker)", path, 0)
                result = ScanResult([], [], 0, base_offset, error)
                truncate = False
            if truncate and compacted_end is None:
                result = _whole_client_batches(fd, path, result)
            if truncate and result.valid_bytes < size:
                fsio.truncate(fd, result.valid_bytes)
                fsio.fsync(fd)
                size = result.valid_bytes
        except BaseException:
            os.close(fd)
            raise
        seg = cls(directory, base_offset, fd, size, base_offset, OffsetIndex(base_offset),
                  TimeIndex(base_offset), DeliverAfterIndex(base_offset))
        tail = seg.tail
        for entry, max_ts in zip(result.entries, result.max_timestamps, strict=True):
            tail.index_written(entry.base_offset, entry.position, entry.size, max_ts,
                               index_interval_bytes)
        seg.dly_index = DeliverAfterIndex.from_entries(base_offset, result.entries)
        seg.next_offset = result.next_offset
        if compacted_end is not None:
            seg.compacted = True
            if result.error is None:  # else reads must stop at the damage, as for any segment
                seg.next_offset = compacted_end
        return seg, result.error

    # ------------------------------------------------------------------ writing

    def flush(self) -> None:
        fsio.fsync(self.fd)

    def seal_time_index(self) -> None:
        """Give the time index an entry for the largest timestamp here, unless it has one:
        entries are sparse (one per index interval, when the timestamp grew), so without
        this a persisted segment could hold a record later than its index says, and a
        lookup by time would pass it by. As Kafka appends one when a segment goes
        inactive."""
        last = self.time_index.last_key()
        if self.max_timestamp_offset >= 0 and (last is None or self.max_timestamp > last):
            self.time_index.add(self.max_timestamp, self.max_timestamp_offset)

    def persist_indexes(self) -> None:
        """fsync the .log, then write all three indexes atomically (roll, clean close)."""
        self.seal_time_index()
        fsio.fsync(self.fd)
        size, end = self.size, self.next_offset
        self.offset_index.persist(self.path(INDEX_SUFFIX), log_bytes=size, next_offset=end)
        self.time_index.persist(self.path(TIMEINDEX_SUFFIX), log_bytes=size, next_offset=end)
        self.dly_index.persist(self.path(DLYINDEX_SUFFIX), log_bytes=size, next_offset=end)

    def close(self) -> None:
        if self._mapped is not None:
            self._mapped.close()
            self._mapped = None
        fd = self.tail.fd
        if fd >= 0:
            os.close(fd)
        self.fd = -1

    def delete(self) -> None:
        """Remove the segment's files: the .log first, so a crash part-way leaves only
        orphan indexes, which the next open removes."""
        fsio.unlink(self.log_path)  # if this fails, the segment is untouched and open
        self.close()
        for suffix in COMPANION_SUFFIXES:
            fsio.unlink(self.path(suffix))

    # ------------------------------------------------------------------ reading

    def read_verified(self, entry: Entry) -> tuple[codec.BatchHeader, bytes]:
        """Header and bytes of the batch `entry` points at (an index entry, or the one a
        header walk expects), checked against it (entry_check.check_batch). Raises
        CorruptLogError."""
        data = fsio.pread(self.fd, entry.size, entry.position)
        return check_batch(data, 0, entry, path=self.log_path), data

    def mapped(self) -> MappedFile:
        """The .log mapped into memory, covering at least its `size` bytes (the compiled
        page fill reads batches through it; see mapped_file.pyx). Remapped, with room to
        grow by half again, once the segment has outgrown it."""
        m = self._mapped
        if m is None or m.capacity < self.size:
            if m is not None:
                m.close()
            m = self._mapped = MappedFile(self.fd, self.size + self.size // 2 + _MAP_HEADROOM)
        return m

    def batch_headers(self, start: int = 0) -> Iterator[tuple[int, codec.BatchHeader]]:
        """(position, header) of each batch from byte `start`, reading headers only."""
        return iter_headers(self.fd, self.log_path, start, self.size)
