"""The one batch walker over a .log's framing, in the modes its callers need.

Every mode runs the same loop (`frames`): read the file in large chunks, parse and
sanity-check each batch header (codec.parse_header), step over the batch by its length.
Per batch that is one header parse; a chunk read costs one syscall per few MiB. The
columnar mode (`frame_runs`) is that loop with each read's headers parsed by one compiled
pass making the same checks; where the pass stops, parse_header decides, so every framing
error is worded in one place (a test holds the two loops to the same batches and errors).

- strict (`scan_log`, recovery): also checks offset continuity and CRCs, and stops at the
  first torn or corrupt batch, saying where (`ScanResult.error`).
- header-only (`iter_headers`, offset lookups): reads only the header of each batch
  (codec.HEADER_SIZE, 69 bytes).
- tolerant (`walk`, inspection): a CRC failure is reported on the batch and the walk goes
  on; where the framing breaks a `FramingBreak` is yielded and, with resync, the walk
  resumes at the next intact batch (`resync`).
- columnar (Spark's reader): `frame_runs`, the same walk with each read's headers parsed
  into columns by one compiled pass; the caller skips batches outside its bounds without
  a CRC check.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c
import numpy as np

from ... import fsio
from ...errors import CorruptLogError
from ...index.entry import Entry
from . import codec
from .header_walk import (
    H_BASE_OFFSET,
    H_BASE_TIMESTAMP,
    H_CRC,
    H_DELIVER_AFTER,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_RECORD_COUNT,
    H_REL,
    H_SIZE,
    HEADER_ROWS,
    check_crcs,
    walk_headers,
)
from .offset_continuity import check_continues

CHUNK = 8 << 20  # bytes read per syscall
RESYNC_LIMIT = 256 << 20  # how far past a framing break to look for the next intact batch

# (position, length) -> the bytes there
Reader = Callable[[int, int], "bytes | bytearray | memoryview"]
Progress = Callable[[int], None]  # called with bytes just walked


class Frame(NamedTuple):
    """One batch found by `frames`: its file position and header, and the buffer holding
    it at `rel` (the whole batch, unless walking headers only)."""

    position: int
    header: codec.BatchHeader
    buf: bytes | bytearray
    rel: int


def frames(read: Reader, start: int, end: int, *, path: str | None = None,
           chunk: int = CHUNK, headers_only: bool = False) -> Iterator[Frame]:
    """The framing parse every mode shares: each batch from `start` up to `end`, in file
    order. Raises CorruptLogError (with the file position) where the framing breaks: a bad
    header, or a batch running past `end`."""
    buf: bytes | bytearray | memoryview = b""
    buf_pos = pos = start
    avail = 0  # file bytes in buf
    header_size = codec.HEADER_SIZE
    parse = codec.parse_header
    make = tuple.__new__  # a Frame without NamedTuple's Python-level __new__ (hot loop)
    while pos < end:
        rel = pos - buf_pos
        if avail - rel < header_size:
            want = header_size if headers_only else chunk
            buf = read(pos, min(max(want, header_size), end - pos))
            buf_pos, rel, avail = pos, 0, len(buf)
        # a batch may run past the buffer (read again below), not past `end`; a buffer
        # short of a whole header means the file ended early
        room = avail - rel
        h = parse(buf, rel, path=path, file_pos=pos,
                  available=room if room < header_size else end - pos)
        if not headers_only and room < h.size:
            buf = read(pos, min(max(chunk, h.size), end - pos))
            buf_pos, rel, avail = pos, 0, len(buf)
            if avail < h.size:  # the file shrank under us
                raise CorruptLogError(f"truncated batch: batchLength says {h.size} bytes, "
                                      f"{avail} remain", path, pos)
        yield make(Frame, (pos, h, buf, rel))
        pos += h.size


# ---------------------------------------------------------------------------- columnar

# the rows of walk_headers' output, one column per batch: H_* and HEADER_ROWS, defined
# once (header_walk.pxd) and imported above


class HeaderColumns:
    """Batch headers as columns (int64 arrays, one entry per batch, in file order), the
    fields a reader of many batches needs. `rel` is where a batch starts in its buffer."""

    __slots__ = ("table",)

    def __init__(self, table: np.ndarray):
        self.table = table  # HEADER_ROWS x batches

    def __len__(self) -> int:
        return self.table.shape[1]

    @classmethod
    def of(cls, rels: Sequence[int], headers: Sequence[codec.BatchHeader]) -> HeaderColumns:
        """From headers already parsed (codec.parse_header) at `rels`."""
        table = np.empty((HEADER_ROWS, len(headers)), dtype=np.int64)
        for i, (rel, h) in enumerate(zip(rels, headers, strict=True)):
            table[:, i] = (rel, h.base_offset, h.size, h.last_offset_delta, h.base_timestamp,
                           h.max_timestamp, h.deliver_after, h.record_count, h.crc)
        return cls(table)

    @classmethod
    def walk(cls, buf: np.ndarray, start: int, capacity: int) -> tuple[HeaderColumns, int]:
        """The batches lying wholly in `buf` (uint8) back to back from `start`, at most
        `capacity` of them, parsed and checked by one compiled walk (walk_headers), and the
        position where the walk stopped."""
        table = np.empty((HEADER_ROWS, capacity), dtype=np.int64)
        n, stop = walk_headers(buf, start, table, codec.HEADER_LAYOUT)
        return cls(table[:, :n]), stop

    def take(self, which: np.ndarray) -> HeaderColumns:
        """The batches at indexes (or where a boolean mask is true) `which`."""
        return HeaderColumns(self.table[:, which])

    def header(self, i: int, buf) -> codec.BatchHeader:
        """Batch i's full header, parsed again from `buf` (for the rare batch handled one
        at a time)."""
        return codec.parse_header(buf, int(self.rel[i]))

    def crc_valid(self, buf) -> np.ndarray:
        """Per batch: does its CRC-32C match? One compiled pass (check_crcs)."""
        out = np.empty(len(self), dtype=np.uint8)
        check_crcs(np.frombuffer(buf, dtype=np.uint8), self.table, codec.HEADER_LAYOUT, out)
        return out.view(bool)

    rel = property(lambda self: self.table[H_REL])
    base_offset = property(lambda self: self.table[H_BASE_OFFSET])
    size = property(lambda self: self.table[H_SIZE])
    last_offset_delta = property(lambda self: self.table[H_LAST_OFFSET_DELTA])
    base_timestamp = property(lambda self: self.table[H_BASE_TIMESTAMP])
    max_timestamp = property(lambda self: self.table[H_MAX_TIMESTAMP])
    deliver_after = property(lambda self: self.table[H_DELIVER_AFTER])
    record_count = property(lambda self: self.table[H_RECORD_COUNT])
    crc = property(lambda self: self.table[H_CRC])


class FrameRun(NamedTuple):
    """Batches found back to back by `frame_runs`: the buffer that holds them whole, the
    file position of its first byte, and their headers."""

    buf: bytes | bytearray | memoryview
    buf_pos: int
    headers: HeaderColumns


_RUN_CAPACITY = 1 << 16  # batches parsed per kernel call (a 69-byte header each, at least)


def frame_runs(read: Reader, start: int, end: int, *, path: str | None = None,
               chunk: int = CHUNK) -> Iterator[FrameRun]:
    """`frames`, a buffer at a time: the same batches, checks and errors, but the headers
    of each read are parsed by one compiled walk (walk_headers) into columns, for
    readers of many batches that want no Python work per batch. Where the walk stops short
    of the buffer's end, codec.parse_header looks at that batch: it raises what is wrong,
    or the batch runs past the buffer and is read again from its start."""
    pos = start
    want = chunk
    header_size = codec.HEADER_SIZE
    while pos < end:
        length = min(max(want, header_size), end - pos)
        buf = read(pos, length)
        view = np.frombuffer(buf, dtype=np.uint8)
        buf_pos, rel = pos, 0
        while True:  # more than one walk only when a buffer holds over _RUN_CAPACITY batches
            cap = min(_RUN_CAPACITY, (len(buf) - rel) // header_size + 1)
            headers, rel = HeaderColumns.walk(view, rel, cap)
            if len(headers):
                yield FrameRun(buf, buf_pos, headers)
            if len(headers) < cap:
                break
        pos = buf_pos + rel
        want = chunk
        room = len(buf) - rel
        if pos >= end or (room < header_size and rel > 0 and pos + room < end):
            continue  # the end, or the read ended inside a header: read on from it
        h = codec.parse_header(buf, rel, path=path, file_pos=pos,
                               available=room if room < header_size else end - pos)
        if h.size <= room:
            raise AssertionError("walk_headers refused a batch that "
                                 "codec.parse_header accepts")
        if rel == 0 and length >= h.size:  # the file shrank under us
            raise CorruptLogError(f"truncated batch: batchLength says {h.size} bytes, "
                                  f"{room} remain", path, pos)
        want = max(chunk, h.size)  # the batch runs past the buffer: read from its start


def _pread(fd: int, read: Callable[[int, int, int], bytes] = fsio.pread) -> Reader:
    return lambda pos, length: read(fd, length, pos)


# ---------------------------------------------------------------------------- strict


class ScanResult(NamedTuple):
    """What a strict scan of a .log found: every good batch, where the good bytes end, and
    the problem that stopped it (None if it reached the end cleanly)."""

    entries: list[Entry]
    max_timestamps: list[int]
    valid_bytes: int
    next_offset: int
    error: CorruptLogError | None


def base_offsets_crc(entries: Sequence[Entry]) -> int:
    """CRC-32C of the batches' base offsets (i64 little-endian), in file order. A batch's
    own CRC does not cover its base offset, and a compacted segment may have offset gaps, so
    its marker keeps this to check a scan's base offsets against. O(batches)."""
    return crc32c.crc32c(np.array([e.base_offset for e in entries], dtype="<i8").tobytes())


def scan_log(fd: int, path: str, base_offset: int, *, start: int = 0, end: int | None = None,
             check_crc: bool = True, expected_offset: int | None = None,
             index_bad_crc: bool = False, gaps: bool = False) -> ScanResult:
    """Walk the batches of a .log from `start`, checking framing, offset continuity and
    (optionally) CRCs; stops at the first problem (with `index_bad_crc`, a batch whose
    framing is sound but whose CRC fails is listed and the walk goes on). `gaps`: the
    segment is a compacted one (offset_continuity: its batches may skip offsets forward).
    O(file size) for the CRCs, one header parse per batch."""
    if end is None:
        end = os.fstat(fd).st_size
    entries: list[Entry] = []
    max_ts: list[int] = []
    pos = start
    next_offset = base_offset if expected_offset is None else expected_offset
    error = None
    try:
        for pos, h, buf, rel in frames(_pread(fd), start, end, path=path):
            check_continues(h.base_offset, next_offset, gaps, path, pos)
            if check_crc and not codec.crc_ok(buf, rel, h):
                e = CorruptLogError("CRC-32C mismatch", path, pos)
                if not index_bad_crc:
                    raise e
                error = error or e
            entries.append(Entry(h.deliver_after, h.base_offset, pos, h.last_offset_delta,
                                 h.size))
            max_ts.append(h.max_timestamp)
            next_offset = h.last_offset + 1
            pos += h.size
    except CorruptLogError as e:
        error = error or e
    return ScanResult(entries, max_ts, pos, next_offset, error)


def unfinished_client_batch(fd: int, entries: Sequence[Entry]) -> int | None:
    """Index in `entries` (a scan's batches, in file order) of the first stored batch of a
    client batch whose last run is missing: the trailing batches that carry
    codec.MORE_RUNS (a crash tore the one write of its runs after whole runs). None when
    the last batch ends a client batch. One 2-byte read per trailing run."""
    i = len(entries)
    while i > 0 and int.from_bytes(fsio.pread(fd, 2, entries[i - 1].position + codec.CRC_START),
                                   "big") & codec.MORE_RUNS:
        i -= 1
    return i if i < len(entries) else None


# ---------------------------------------------------------------------------- header-only


def iter_headers(fd: int, path: str, start: int, end: int
                 ) -> Iterator[tuple[int, codec.BatchHeader]]:
    """(position, header) of each batch from byte `start`, reading headers only (one small
    read per batch: meant for short walks from an index entry). Raises CorruptLogError."""
    for f in frames(_pread(fd), start, end, path=path, headers_only=True):
        yield f.position, f.header


# ---------------------------------------------------------------------------- tolerant


@dataclass
class Batch:
    """A batch found by the tolerant walk; `crc_valid` False when its CRC fails."""

    position: int
    header: codec.BatchHeader
    crc_valid: bool
    data: bytes | None = None  # the whole batch, when asked for

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def size(self) -> int:
        return self.header.size

    def entry(self) -> Entry:
        """Its DeliverAfterIndex entry."""
        h = self.header
        return Entry(h.deliver_after, h.base_offset, self.position, h.last_offset_delta, h.size)


@dataclass
class FramingBreak:
    """Where batches stop parsing: `reason` says why, `resume_at` is the next position at
    which an intact batch (sane header, good CRC) was found, or None."""

    position: int
    reason: str
    resume_at: int | None
    file_size: int

    def describe(self) -> str:
        if self.resume_at is None:
            return (f"framing breaks: {self.reason}; no intact batch follows "
                    f"({self.file_size - self.position} bytes unreadable to the end)")
        return (f"framing breaks: {self.reason}; next intact batch at byte {self.resume_at} "
                f"({self.resume_at - self.position} bytes skipped)")


def walk(fd: int, start: int, end: int, *, check_crc: bool = True, keep_data: bool = False,
         resync: bool = True, progress: Progress | None = None
         ) -> Iterator[Batch | FramingBreak]:
    """Every batch from `start` to `end` in file order, never stopping at damage: a batch
    whose CRC fails is yielded with crc_valid False and the walk goes on after it; where the
    framing breaks a FramingBreak is yielded and, with `resync`, the walk resumes at the
    next intact batch. Reads with plain os.pread (tools, not the engine's fault seam)."""
    read = _pread(fd, os.pread)
    pos = reported = start
    last_bad: int | None = None  # position of a CRC-failed batch just before `pos`
    while pos < end:
        try:
            for f in frames(read, pos, end):
                ok = codec.crc_ok(f.buf, f.rel, f.header) if check_crc else True
                data = bytes(f.buf[f.rel:f.rel + f.header.size]) if keep_data else None
                yield Batch(f.position, f.header, ok, data)
                last_bad = None if ok else f.position
                pos = f.position + f.header.size
                if progress and pos - reported >= 1 << 20:
                    progress(pos - reported)
                    reported = pos
        except CorruptLogError as e:
            # after a CRC-failed batch its length field is suspect: search from inside it
            search_from = (last_bad if last_bad is not None else pos) + 1
            resume = find_intact(fd, search_from, end) if resync else None
            # the reason without the "(path at byte N)" suffix: the break says where
            yield FramingBreak(pos, str(e), resume, end)
            if resume is None:
                break
            pos, last_bad = resume, None
    if progress and end > reported:
        progress(end - reported)


_MAGIC_BYTE = bytes([codec.MAGIC])


def find_intact(fd: int, start: int, end: int, limit: int = RESYNC_LIMIT) -> int | None:
    """The first position >= start holding an intact batch (magic byte, sane header, good
    CRC), looking at most `limit` bytes ahead; None if there is none. O(bytes searched)."""
    pos = start
    stop = min(end, start + limit)
    while pos < stop:
        buf = os.pread(fd, min(CHUNK, end - pos), pos)
        if len(buf) < codec.HEADER_SIZE:
            return None
        i = codec.MAGIC_OFFSET
        last_candidate = len(buf) - codec.HEADER_SIZE
        while True:
            i = buf.find(_MAGIC_BYTE, i)
            p = i - codec.MAGIC_OFFSET
            if i < 0 or p > last_candidate:
                break
            try:
                h = codec.parse_header(buf, p, available=end - (pos + p))
            except CorruptLogError:
                i += 1
                continue
            data = buf[p:p + h.size] if p + h.size <= len(buf) else os.pread(fd, h.size,
                                                                                pos + p)
            if codec.crc_ok(data, 0, h):
                return pos + p
            i += 1
        pos += last_candidate + 1
    return None
