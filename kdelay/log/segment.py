"""LogSegment: one .log file of batches and its three indexes, named by base offset.

The .log is append-only. Indexes of the active segment grow in memory; `persist_indexes`
writes them atomically (on roll and on clean close) and re-maps them. A segment whose
persisted indexes are missing, stale or corrupt is rebuilt from a scan of its .log.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NamedTuple

from .. import fsio
from ..errors import CorruptLogError, IndexFileError
from ..index.deliver_after_index import DeliverAfterIndex, Entry
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from . import codec

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DLYINDEX_SUFFIX = ".dlyindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, DLYINDEX_SUFFIX)
_SCAN_CHUNK = 8 << 20


def segment_name(base_offset: int) -> str:
    """Kafka's naming: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


def segment_file(directory: str, base_offset: int, suffix: str) -> str:
    """The path of one of a segment's files, e.g. `segment_file(d, 0, LOG_SUFFIX)`."""
    return os.path.join(directory, segment_name(base_offset) + suffix)


def parse_segment_name(filename: str) -> tuple[int, str] | None:
    stem, dot, suffix = filename.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + suffix


class ScanResult(NamedTuple):
    """What a scan of a .log found: every good batch, where the good bytes end, and the
    problem that stopped it (None if it reached the end cleanly)."""

    entries: list[Entry]
    max_timestamps: list[int]
    valid_bytes: int
    next_offset: int
    error: CorruptLogError | None


def scan_log(fd: int, path: str, base_offset: int, *, start: int = 0, end: int | None = None,
             check_crc: bool = True, expected_offset: int | None = None,
             index_bad_crc: bool = False) -> ScanResult:
    """Walk the batches of a .log from `start`, checking framing, offset continuity and
    (optionally) CRCs; stops at the first problem (with `index_bad_crc`, a batch whose
    framing is sound but whose CRC fails is listed and the walk goes on). Reads in large
    chunks, so a scan costs one syscall per few MiB, and per batch only a header parse and
    a CRC."""
    if end is None:
        end = os.fstat(fd).st_size
    entries: list[Entry] = []
    max_ts: list[int] = []
    pos = start
    next_offset = base_offset if expected_offset is None else expected_offset
    buf = b""
    buf_pos = pos
    error = None
    while pos < end:
        rel = pos - buf_pos
        if len(buf) - rel < codec.HEADER_SIZE:
            buf = fsio.pread(fd, max(_SCAN_CHUNK, codec.HEADER_SIZE), pos)
            buf_pos, rel = pos, 0
        try:
            h = codec.parse_header(buf, rel, path=path, file_pos=pos, available=end - pos)
            if len(buf) - rel < h.size:
                buf = fsio.pread(fd, max(_SCAN_CHUNK, h.size), pos)
                buf_pos, rel = pos, 0
            if h.base_offset != next_offset:
                raise CorruptLogError(
                    f"batch base offset {h.base_offset}, expected {next_offset}", path, pos)
            if check_crc:
                try:
                    codec.check_crc(buf, rel, h, path=path, file_pos=pos)
                except CorruptLogError as e:
                    if not index_bad_crc:
                        raise
                    error = error or e
        except CorruptLogError as e:
            error = error or e
            break
        entries.append((h.deliver_after, h.base_offset, pos, h.last_offset_delta, h.size))
        max_ts.append(h.max_timestamp)
        next_offset = h.last_offset + 1
        pos += h.size
    return ScanResult(entries, max_ts, pos, next_offset, error)


class LogSegment:
    def __init__(self, directory: str, base_offset: int, fd: int, size: int, next_offset: int,
                 offset_index: OffsetIndex, time_index: TimeIndex,
                 dly_index: DeliverAfterIndex, first_timestamp: int | None):
        self.directory = directory
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX)
        self.base_offset = base_offset
        self.fd = fd
        self.size = size
        self.next_offset = next_offset
        self.offset_index = offset_index
        self.time_index = time_index
        self.dly_index = dly_index
        # max timestamp of the first batch, for segment_ms; read lazily so that opening a
        # sealed segment reads none of its .log
        self._first_timestamp = first_timestamp
        self._bytes_since_index_entry = 0
        self.max_timestamp = -1 if time_index.last_key() is None else time_index.last_key()

    @property
    def first_timestamp(self) -> int | None:
        if self._first_timestamp is None and self.size:
            head = fsio.pread(self.fd, codec.HEADER_SIZE, 0)
            self._first_timestamp = codec.parse_header(
                head, path=self.log_path, file_pos=0, available=self.size).max_timestamp
        return self._first_timestamp

    # ------------------------------------------------------------------ paths

    def path(self, suffix: str) -> str:
        return segment_file(self.directory, self.base_offset, suffix)

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, directory: str, base_offset: int) -> LogSegment:
        fd = fsio.open_append(os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX))
        fsio.truncate(fd, 0)
        return cls(directory, base_offset, fd, 0, base_offset, OffsetIndex(base_offset),
                   TimeIndex(base_offset), DeliverAfterIndex(base_offset), None)

    @classmethod
    def load(cls, directory: str, base_offset: int) -> LogSegment:
        """Open with its persisted indexes, reading no log data beyond the first header.
        Raises IndexFileError if any index is missing, stale or corrupt."""
        fd = fsio.open_append(os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX))
        try:
            size = os.fstat(fd).st_size
            name = os.path.join(directory, segment_name(base_offset))
            kw = {"base_offset": base_offset, "log_bytes": size}
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
        return cls(directory, base_offset, fd, size, next_offset, oi, ti, di, None)

    @classmethod
    def recover(cls, directory: str, base_offset: int, *, index_interval_bytes: int,
                check_crc: bool, truncate: bool) -> tuple[LogSegment, CorruptLogError | None]:
        """Rebuild every index from a scan of the .log. With `truncate`, a torn or corrupt
        tail is cut off (the segment was not known to be flushed); otherwise indexing stops
        at the damage and the error is returned for the caller to report."""
        path = os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX)
        fd = fsio.open_append(path)
        try:
            # Not truncating (a flushed segment): index a batch that fails only its CRC, so
            # that reads reaching it raise CorruptLogError and the intact batches behind it
            # stay fetchable, rather than silently dropping them from the index.
            result = scan_log(fd, path, base_offset, check_crc=check_crc,
                              index_bad_crc=not truncate)
            size = os.fstat(fd).st_size
            if truncate and result.valid_bytes < size:
                fsio.truncate(fd, result.valid_bytes)
                fsio.fsync(fd)
                size = result.valid_bytes
        except BaseException:
            os.close(fd)
            raise
        seg = cls(directory, base_offset, fd, size, base_offset, OffsetIndex(base_offset),
                  TimeIndex(base_offset), DeliverAfterIndex(base_offset), None)
        for entry, max_ts in zip(result.entries, result.max_timestamps, strict=True):
            seg._index_batch(entry, max_ts, index_interval_bytes)
        seg.dly_index = DeliverAfterIndex.from_entries(base_offset, result.entries)
        seg.next_offset = result.next_offset
        return seg, result.error

    # ------------------------------------------------------------------ writing

    def append(self, batch: bytes, header_base: int, last_offset_delta: int, deliver_after: int,
               max_timestamp: int, index_interval_bytes: int) -> int:
        """Write one encoded batch at the end; returns its position."""
        pos = self.size
        try:
            fsio.write(self.fd, batch, pos)
        except OSError:
            # a short write (disk full) left part of the batch on disk: cut it off, so that
            # the file holds only whole batches and the next append lands at `pos`
            with contextlib.suppress(OSError):  # best effort: recovery cuts a torn tail too
                fsio.truncate(self.fd, pos)
            raise
        self.size = pos + len(batch)
        entry = (deliver_after, header_base, pos, last_offset_delta, len(batch))
        self._index_batch(entry, max_timestamp, index_interval_bytes)
        self.dly_index.add(*entry)
        self.next_offset = header_base + last_offset_delta + 1
        return pos

    def _index_batch(self, entry: Entry, max_timestamp: int, interval: int) -> None:
        """Offset and time index upkeep for one batch (the dly index is handled by callers)."""
        _, base, pos, _, size = entry
        if self._first_timestamp is None:
            self._first_timestamp = max_timestamp
        if self._bytes_since_index_entry >= interval:
            self.offset_index.add(base, pos)
            if max_timestamp > self.max_timestamp:
                self.time_index.add(max_timestamp, base)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self.max_timestamp = max(self.max_timestamp, max_timestamp)

    def flush(self) -> None:
        fsio.fsync(self.fd)

    def persist_indexes(self) -> None:
        """fsync the .log, then write all three indexes atomically (roll, clean close)."""
        fsio.fsync(self.fd)
        kw = {"log_bytes": self.size, "next_offset": self.next_offset}
        self.offset_index.persist(self.path(INDEX_SUFFIX), **kw)
        self.time_index.persist(self.path(TIMEINDEX_SUFFIX), **kw)
        self.dly_index.persist(self.path(DLYINDEX_SUFFIX), **kw)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """Remove the segment's files: the .log first, so a crash part-way leaves only
        orphan indexes, which the next open removes."""
        self.close()
        fsio.unlink(self.log_path)
        for suffix in INDEX_SUFFIXES:
            fsio.unlink(self.path(suffix))

    # ------------------------------------------------------------------ reading

    def read_verified(self, position: int, size: int, expected_base: int
                      ) -> tuple[codec.BatchHeader, bytes]:
        """Header and bytes of the batch at `position`, verified: header sane, base offset
        and size as the index said, CRC good. Raises CorruptLogError."""
        data = fsio.pread(self.fd, size, position)
        h = codec.parse_header(data, path=self.log_path, file_pos=position)
        if h.base_offset != expected_base or h.size != size:
            raise CorruptLogError(
                f"batch at this position has base offset {h.base_offset} and {h.size} bytes; "
                f"the index expected {expected_base} and {size}", self.log_path, position)
        codec.check_crc(data, 0, h, path=self.log_path, file_pos=position)
        return h, data

    def batch_headers(self, start: int = 0) -> Iterator[tuple[int, codec.BatchHeader]]:
        """(position, header) of each batch from byte `start`, reading headers only."""
        pos = start
        while pos < self.size:
            head = fsio.pread(self.fd, codec.HEADER_SIZE, pos)
            h = codec.parse_header(head, path=self.log_path, file_pos=pos,
                                   available=self.size - pos)
            yield pos, h
            pos += h.size

    def find_batch(self, offset: int) -> tuple[int, codec.BatchHeader] | None:
        """The batch holding `offset`, found via the sparse offset index."""
        if not (self.base_offset <= offset < self.next_offset):
            return None
        entry = self.offset_index.floor(offset)
        expected, start = (self.base_offset, 0) if entry is None else entry
        for pos, h in self.batch_headers(start):
            # the index entry (or the segment base) says which offset each batch must start
            # at; a damaged base offset would otherwise be believed
            if h.base_offset != expected:
                raise CorruptLogError(f"batch base offset {h.base_offset}, expected {expected}",
                                      self.log_path, pos)
            if h.last_offset >= offset:
                return pos, h
            expected = h.last_offset + 1
        return None
