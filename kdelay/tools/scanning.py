"""What every inspection command shares: finding partitions and segments, walking a .log
tolerantly, reading index files without trusting them, and the errors tools report.

Everything here only reads. No lock is taken and nothing is written, so it is safe on a log
that a writer has open. Unlike the engine's loader, nothing stops at the first problem: a
damaged batch is reported and the walk goes on, and a framing break is followed by a search
for the next intact batch (log/batch/walker.py's tolerant mode).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import InspectError
from ..index.base import AbstractIndex
from ..index.deliver_after_index import DeliverAfterIndex
from ..index.index_file import HEADER_SIZE, IndexReading, kind_of
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..log.batch.walker import Batch, FramingBreak, Progress, walk
from ..log.compaction.swap import read_marker
from ..log.segments import layout
from ..log.segments.layout import MARKER_SUFFIX, SegmentFiles
from ..log.segments.live_tail import append_in_flight

# ---------------------------------------------------------------------------- index kinds


@dataclass(frozen=True)
class IndexKind:
    """An index class as tools see it: its file suffix beside what the class names."""

    suffix: str
    index: type[AbstractIndex]

    @property
    def name(self) -> str:
        return self.index.NAME

    @property
    def magic(self) -> bytes:
        return self.index.MAGIC

    @property
    def columns(self) -> tuple[str, ...]:
        return self.index.COLUMNS

    @property
    def dtypes(self) -> list[np.dtype]:
        return self.index.DTYPES


DLY = IndexKind(layout.DLYINDEX_SUFFIX, DeliverAfterIndex)
OFFSET = IndexKind(layout.INDEX_SUFFIX, OffsetIndex)
TIME = IndexKind(layout.TIMEINDEX_SUFFIX, TimeIndex)
KINDS = {k.suffix: k for k in (DLY, OFFSET, TIME)}
_KIND_BY_MAGIC = {kind_of(k.magic): k for k in (DLY, OFFSET, TIME)}  # any format version


def kind_for_path(path: str) -> IndexKind | None:
    for suffix, kind in KINDS.items():
        if path.endswith(suffix):
            return kind
    return None


@dataclass
class IndexFile(IndexReading):
    """An index file read leniently (index_file.IndexReading), with the kind it was read
    as, and the kind it really holds when that is another one."""

    kind: IndexKind = field(kw_only=True)  # (required: after the reading's defaults)
    wrong_kind: IndexKind | None = None


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiouAEIOU" else "a ") + noun


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def read_index_file(path: str, kind: IndexKind) -> IndexFile:
    """Read an index of `kind` without trusting it. Raises InspectError for a directory."""
    try:
        reading = kind.index.read_lenient(path)
    except IsADirectoryError:
        raise InspectError(f"{path}: is a directory, expected an index file") from None
    out = IndexFile(**vars(reading), kind=kind)
    found = None if reading.magic is None else kind_of(reading.magic)
    other = _KIND_BY_MAGIC.get(found) \
        if found is not None and found != kind_of(kind.magic) else None
    if other is not None:
        out.wrong_kind = other
        out.problems[:] = [f"holds {_a(other.name)} (magic {reading.magic!r}), not "
                               f"{_a(kind.name)}"]
    return out


def entry_file_position(index: IndexFile, i: int) -> int:
    """Byte position in the index file of entry i's first column value."""
    return HEADER_SIZE + i * index.kind.dtypes[0].itemsize


# ---------------------------------------------------------------------------- directories


def existing(path: str) -> str:
    if not os.path.exists(path):
        raise InspectError(f"{path}: no such file or directory")
    return path


def partition_dirs(path: str) -> list[str]:
    """`path` itself if it is a partition directory, else its partition subdirectories
    (a topic root, or a directory of topics' partitions). Raises InspectError."""
    existing(path)
    if not os.path.isdir(path):
        raise InspectError(f"{path}: not a directory")
    try:
        under_root, parts = layout.find_partitions(path)
    except OSError as e:
        raise InspectError(f"{path}: cannot list: {e.strerror}") from None
    # a `<topic>-<n>` directory with nothing in it yet is no log to inspect
    found = sorted(p.path for p in parts if not under_root or layout.is_partition_dir(p.path))
    if not found:
        raise InspectError(f"{path}: not a kdelay log directory (no segment files, and no "
                           f"partition directories inside)")
    return found


def list_segments(directory: str) -> list[SegmentFiles]:
    """The directory's segments in offset order (one per .log file). Raises InspectError."""
    try:
        return layout.list_segments(directory)
    except OSError as e:
        raise InspectError(f"{directory}: cannot list: {e.strerror}") from None


def total_log_bytes(directory: str) -> int:
    return sum(s.log_size for s in list_segments(directory))


# ---------------------------------------------------------------------------- batches


def open_log_file(path: str) -> tuple[int, int]:
    """(read-only descriptor, size) of a .log file. Raises InspectError."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise InspectError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InspectError(f"{path}: is a directory, expected a .log file") from None
    except OSError as e:
        raise InspectError(f"{path}: cannot open: {e.strerror}") from None
    return fd, os.fstat(fd).st_size


def scan_batches(path: str, *, start: int = 0, end: int | None = None, check_crc: bool = True,
                 keep_data: bool = False, resync: bool = True,
                 progress: Progress | None = None) -> Iterator[Batch | FramingBreak]:
    """Every batch of a .log from `start`, in file order (the walker's tolerant mode)."""
    fd, size = open_log_file(path)
    try:
        end = size if end is None else min(end, size)
        yield from walk(fd, start, end, check_crc=check_crc, keep_data=keep_data,
                        resync=resync, progress=progress)
    finally:
        os.close(fd)


@dataclass
class SegmentScan:
    """What a full walk of one .log found."""

    segment: SegmentFiles
    batches: list[Batch]
    breaks: list[FramingBreak]
    max_timestamps: list[int]
    # a compacted segment (its marker, see kdelay/log/compaction/swap.py): offsets may have gaps and
    # the segment ends at `end_offset`; `marker_damaged`: the marker is there but unreadable
    end_offset: int | None = None
    marker_damaged: bool = False
    bases_crc: int | None = None  # the marker's checksum of the batch base offsets

    @property
    def records(self) -> int:
        return sum(b.header.record_count for b in self.batches)

    def next_offset(self, upto_bytes: int | None = None) -> int:
        """One past the last offset of the batches that end within `upto_bytes` (for a
        compacted segment read whole: the end offset its marker gives)."""
        nxt = self.segment.base_offset
        for b in self.batches:
            if upto_bytes is not None and b.position + b.size > upto_bytes:
                return nxt
            nxt = b.last_offset + 1
        return nxt if self.end_offset is None else self.end_offset


def scan_segment(seg: SegmentFiles, *, check_crc: bool = True,
                 progress: Progress | None = None) -> SegmentScan:
    batches, breaks = [], []
    for item in scan_batches(seg.log_path, end=seg.log_size, check_crc=check_crc,
                             progress=progress):
        if isinstance(item, FramingBreak):
            breaks.append(item)
        else:
            batches.append(item)
    end, damaged = compaction_marker(seg)
    marker = None if end is None else read_marker(seg.directory, seg.base_offset)
    return SegmentScan(seg, batches, breaks, [b.header.max_timestamp for b in batches],
                       end, damaged, marker and marker.bases_crc)


def compaction_marker(seg: SegmentFiles) -> tuple[int | None, bool]:
    """(end offset, damaged) of a segment's compaction marker; (None, False) without one."""
    if not os.path.exists(seg.path(MARKER_SUFFIX)):
        return None, False
    marker = read_marker(seg.directory, seg.base_offset)
    return (None, True) if marker is None else (marker.end_offset, False)


def in_flight(seg: SegmentFiles, brk: FramingBreak) -> bool:
    """Is this framing break, the last of a walk of `seg`, the batch a live writer is
    appending right now rather than damage (live_tail.append_in_flight)?"""
    return brk.resume_at is None and append_in_flight(seg.directory, seg.base_offset,
                                                      brk.position, brk.file_size)


def expected_dly_columns(batches: list[Batch]) -> list[np.ndarray]:
    """The DeliverAfterIndex the engine would build from these batches."""
    return DeliverAfterIndex.from_entries(0, [b.entry() for b in batches]).columns()


# ---------------------------------------------------------------------------- reports


@dataclass
class Finding:
    problem: bool  # False: information only
    path: str
    position: int | None
    message: str

    def line(self) -> str:
        tag = "PROBLEM" if self.problem else "info"
        where = self.path if self.position is None else f"{self.path} at byte {self.position}"
        return f"{tag} {where}: {self.message}"

    def as_dict(self) -> dict:
        return {"severity": "problem" if self.problem else "info", "path": self.path,
                "position": self.position, "message": self.message}


@dataclass
class VerifyReport:
    directory: str
    findings: list[Finding] = field(default_factory=list)
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    indexes_checked: int = 0
    remote_copies: int = 0  # committed copies checked in the object store (verify --remote)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: bool, path: str, position: int | None, message: str) -> None:
        self.findings.append(Finding(problem, path, position, message))


# ---------------------------------------------------------------------------- live logs
