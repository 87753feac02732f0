"""Read-only inspection of kdelay logs: list segments, walk batches, read index files
tolerantly, recompute what each index should hold, and compare.

Everything here only reads. No lock is taken and nothing is written, so it is safe on a log
that a writer has open (the CLI's dump-log, dump-index, verify and stats are built on it).
Unlike the engine's loader, nothing stops at the first problem: a damaged batch is reported
and the walk goes on, and a framing break is followed by a search for the next intact batch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c
import numpy as np

from .errors import CorruptLogError, KdelayError
from .index.deliver_after_index import DeliverAfterIndex
from .index.index_file import HEADER, HEADER_SIZE, IndexMeta
from .index.offset_index import OffsetIndex
from .index.time_index import TimeIndex
from .log import codec
from .log.groups import GroupStore
from .log.loader import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE, read_recovery_point
from .log.segment import (
    DLYINDEX_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    parse_segment_name,
    segment_name,
)

Progress = Callable[[int], None]  # called with bytes just scanned
_CHUNK = 8 << 20
RESYNC_LIMIT = 256 << 20  # how far past a framing break to look for the next intact batch


class InspectError(KdelayError):
    """Input the inspector cannot work on: a missing path, a directory that is not a log,
    a file of the wrong kind. Its message is one line meant for a person."""


class IndexUnreadable(KdelayError):
    """An index file too damaged to show (bad magic, header checksum, truncated)."""


# ---------------------------------------------------------------------------- index kinds


@dataclass(frozen=True)
class IndexKind:
    name: str
    suffix: str
    magic: bytes
    columns: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]

    @property
    def entry_size(self) -> int:
        return sum(d.itemsize for d in self.dtypes)


DLY = IndexKind("DeliverAfterIndex", DLYINDEX_SUFFIX, DeliverAfterIndex.MAGIC,
                ("deliver_after", "offset", "position", "last_offset_delta", "size"),
                tuple(DeliverAfterIndex.DTYPES))
OFFSET = IndexKind("offset index", INDEX_SUFFIX, OffsetIndex.MAGIC, ("offset", "position"),
                   tuple(OffsetIndex.DTYPES))
TIME = IndexKind("time index", TIMEINDEX_SUFFIX, TimeIndex.MAGIC, ("timestamp", "offset"),
                 tuple(TimeIndex.DTYPES))
KINDS = {k.suffix: k for k in (DLY, OFFSET, TIME)}
_KIND_BY_MAGIC = {k.magic: k for k in (DLY, OFFSET, TIME)}


# ---------------------------------------------------------------------------- directories


@dataclass(frozen=True)
class SegmentFiles:
    directory: str
    base_offset: int
    log_size: int

    def path(self, suffix: str) -> str:
        return os.path.join(self.directory, segment_name(self.base_offset) + suffix)

    @property
    def log_path(self) -> str:
        return self.path(LOG_SUFFIX)


_LOG_MARKERS = (".lock", CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE)


def is_log_dir(path: str) -> bool:
    """Does `path` look like a partition directory (segment files or kdelay's own files)?"""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(n in _LOG_MARKERS or parse_segment_name(n) is not None for n in names)


def partition_dirs(path: str) -> list[str]:
    """`path` itself if it is a partition directory, else its partition subdirectories
    (a topic root, or a directory of topics' partitions). Raises InspectError."""
    if not os.path.exists(path):
        raise InspectError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        raise InspectError(f"{path}: not a directory")
    if is_log_dir(path):
        return [path]
    try:
        subs = sorted(os.path.join(path, n) for n in os.listdir(path))
    except OSError as e:
        raise InspectError(f"{path}: cannot list: {e.strerror}") from None
    found = [s for s in subs if os.path.isdir(s) and is_log_dir(s)]
    if not found:
        raise InspectError(f"{path}: not a kdelay log directory (no segment files, and no "
                           f"partition directories inside)")
    return found


def list_segments(directory: str) -> list[SegmentFiles]:
    """The directory's segments in offset order (one per .log file)."""
    out = []
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise InspectError(f"{directory}: cannot list: {e.strerror}") from None
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is None or parsed[1] != LOG_SUFFIX:
            continue
        try:
            size = os.path.getsize(os.path.join(directory, name))
        except FileNotFoundError:  # deleted by retention while we looked
            continue
        out.append(SegmentFiles(directory, parsed[0], size))
    return sorted(out, key=lambda s: s.base_offset)


def stray_files(directory: str, bases: set[int]) -> list[str]:
    """Index files without a .log and leftover temp files (the next open removes them)."""
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".tmp") or name.endswith(".deleted"):
            out.append(name)
            continue
        parsed = parse_segment_name(name)
        if parsed and parsed[1] in KINDS and parsed[0] not in bases:
            out.append(name)
    return out


# ---------------------------------------------------------------------------- batches


@dataclass
class Batch:
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

    def entry(self) -> tuple[int, int, int, int, int]:
        """Its DeliverAfterIndex entry."""
        h = self.header
        return (h.deliver_after, h.base_offset, self.position, h.last_offset_delta, h.size)


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
    """Every batch of a .log from `start`, in file order. A batch whose CRC fails is yielded
    with crc_valid False and the walk continues after it; where the framing breaks a
    FramingBreak is yielded and, with `resync`, the walk resumes at the next intact batch."""
    fd, size = open_log_file(path)
    try:
        end = size if end is None else min(end, size)
        yield from _walk(fd, start, end, check_crc, keep_data, resync, progress)
    finally:
        os.close(fd)


def _walk(fd: int, pos: int, end: int, check_crc: bool, keep_data: bool, resync: bool,
          progress: Progress | None) -> Iterator[Batch | FramingBreak]:
    buf = b""
    buf_pos = pos
    reported = pos
    last_bad: int | None = None  # position of a CRC-failed batch just before `pos`
    while pos < end:
        rel = pos - buf_pos
        if rel < 0 or len(buf) - rel < codec.HEADER_SIZE:
            buf = os.pread(fd, min(_CHUNK, end - pos), pos)
            buf_pos, rel = pos, 0
        try:
            h = codec.parse_header(buf, rel, available=end - pos)
        except CorruptLogError as e:
            # after a CRC-failed batch its length field is suspect: search from inside it
            search_from = (last_bad if last_bad is not None else pos) + 1
            resume = _resync(fd, search_from, end) if resync else None
            yield FramingBreak(pos, str(e), resume, end)
            if resume is None:
                if progress:
                    progress(end - reported)
                return
            pos = resume
            last_bad = None
            continue
        if len(buf) - rel < h.size:
            buf = os.pread(fd, max(_CHUNK, h.size), pos)
            buf_pos, rel = pos, 0
        ok = codec.crc_ok(buf, rel, h) if check_crc else True
        data = bytes(buf[rel:rel + h.size]) if keep_data else None
        yield Batch(pos, h, ok, data)
        last_bad = None if ok else pos
        pos += h.size
        if progress and pos - reported >= 1 << 20:
            progress(pos - reported)
            reported = pos
    if progress and end > reported:
        progress(end - reported)


def _resync(fd: int, start: int, end: int, limit: int = RESYNC_LIMIT) -> int | None:
    """The first position >= start holding an intact batch (magic byte, sane header, good
    CRC), looking at most `limit` bytes ahead; None if there is none."""
    pos = start
    stop = min(end, start + limit)
    while pos < stop:
        buf = os.pread(fd, min(_CHUNK, end - pos), pos)
        if len(buf) < codec.HEADER_SIZE:
            return None
        i = 16  # the magic byte sits at batch byte 16
        last_candidate = len(buf) - codec.HEADER_SIZE
        while True:
            i = buf.find(b"\x03", i)
            p = i - 16
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


# ---------------------------------------------------------------------------- index files


@dataclass
class IndexFile:
    """A persisted index read without trusting it: `problems` lists what is wrong with the
    file itself (empty when header and data checksums hold); `columns` are the entries
    (None when the file is too damaged to hold them)."""

    path: str
    kind: IndexKind
    meta: IndexMeta | None = None
    columns: list[np.ndarray] | None = None
    header_crc_ok: bool = False
    data_crc_ok: bool = False
    problems: list[str] = field(default_factory=list)
    missing: bool = False
    wrong_kind: IndexKind | None = None  # set when the file holds another kind of index

    @property
    def entries(self) -> int:
        return 0 if self.columns is None else len(self.columns[0])


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiouAEIOU" else "a ") + noun


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def kind_for_path(path: str) -> IndexKind | None:
    for suffix, kind in KINDS.items():
        if path.endswith(suffix):
            return kind
    return None


def read_index_file(path: str, kind: IndexKind) -> IndexFile:
    out = IndexFile(path, kind)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        out.missing = True
        out.problems.append("missing")
        return out
    except IsADirectoryError:
        raise InspectError(f"{path}: is a directory, expected an index file") from None
    except OSError as e:
        out.problems.append(f"unreadable: {e.strerror}")
        return out
    if len(raw) < HEADER_SIZE:
        out.problems.append(f"truncated: {len(raw)} bytes, shorter than the "
                            f"{HEADER_SIZE}-byte header")
        return out
    fields = HEADER.unpack_from(raw)
    magic = fields[0]
    if magic != kind.magic:
        other = _KIND_BY_MAGIC.get(magic)
        if other is not None:
            out.wrong_kind = other
            out.problems.append(f"holds {_a(other.name)} (magic {magic!r}), not "
                                f"{_a(kind.name)}")
        else:
            out.problems.append(f"not a kdelay index: magic {magic!r}, expected "
                                f"{kind.magic!r}")
        return out
    out.header_crc_ok = crc32c.crc32c(raw[:56]) == fields[8]
    if not out.header_crc_ok:
        out.problems.append("header checksum mismatch")
        return out
    out.meta = IndexMeta(fields[1], fields[2], fields[3], fields[4])
    n = out.meta.entries
    body = raw[HEADER_SIZE:]
    if n < 0 or len(body) != n * kind.entry_size:
        out.problems.append(f"{len(raw)} bytes, but the header's {n} entries need "
                            f"{HEADER_SIZE + max(n, 0) * kind.entry_size}")
        return out
    out.data_crc_ok = crc32c.crc32c(body) == fields[7]
    if not out.data_crc_ok:
        out.problems.append("data checksum mismatch")
    cols, pos = [], 0
    for d in kind.dtypes:
        cols.append(np.frombuffer(body, dtype=d, count=n, offset=pos))
        pos += n * d.itemsize
    out.columns = cols
    return out


def entry_file_position(index: IndexFile, i: int) -> int:
    """Byte position in the index file of entry i's first column value."""
    return HEADER_SIZE + i * index.kind.dtypes[0].itemsize


# ---------------------------------------------------------------------------- segment scan


@dataclass
class SegmentScan:
    """What a full walk of one .log found."""

    segment: SegmentFiles
    batches: list[Batch]
    breaks: list[FramingBreak]
    max_timestamps: list[int]

    @property
    def records(self) -> int:
        return sum(b.header.record_count for b in self.batches)

    def next_offset(self, upto_bytes: int | None = None) -> int:
        """One past the last offset of the batches that end within `upto_bytes`."""
        nxt = self.segment.base_offset
        for b in self.batches:
            if upto_bytes is not None and b.position + b.size > upto_bytes:
                break
            nxt = b.last_offset + 1
        return nxt


def scan_segment(seg: SegmentFiles, *, check_crc: bool = True,
                 progress: Progress | None = None) -> SegmentScan:
    batches, breaks = [], []
    for item in scan_batches(seg.log_path, end=seg.log_size, check_crc=check_crc,
                             progress=progress):
        if isinstance(item, FramingBreak):
            breaks.append(item)
        else:
            batches.append(item)
    return SegmentScan(seg, batches, breaks, [b.header.max_timestamp for b in batches])


def expected_dly_columns(batches: list[Batch]) -> list[np.ndarray]:
    """The DeliverAfterIndex the engine would build from these batches."""
    return DeliverAfterIndex.from_entries(0, [b.entry() for b in batches]).columns()


# ---------------------------------------------------------------------------- verify


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

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: bool, path: str, position: int | None, message: str) -> None:
        self.findings.append(Finding(problem, path, position, message))


def verify_partition(directory: str, *, only_base: int | None = None,
                     progress: Progress | None = None) -> VerifyReport:
    """Check every batch's CRC, offset continuity within and across segments, and every
    persisted index against what its .log says. Only reads."""
    rep = VerifyReport(directory)
    segments = list_segments(directory)
    clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    if not segments:
        rep.add(False, directory, None, "no segments (an empty log)")
        return rep
    bases = {s.base_offset for s in segments}
    if only_base is None:
        for name in stray_files(directory, bases):
            rep.add(False, os.path.join(directory, name), None,
                    "leftover file (removed on next open)")
    prev_next: int | None = None
    prev_path = ""
    for i, seg in enumerate(segments):
        active = i == len(segments) - 1
        if only_base is not None and seg.base_offset != only_base:
            continue  # one segment asked for: its neighbours are not read
        scan = _scan_for_verify(seg, active and not clean, progress)
        if scan is None:
            rep.add(False, seg.log_path, None, "segment deleted during the check (retention)")
            continue
        rep.segments += 1
        rep.batches += len(scan.batches)
        rep.records += scan.records
        rep.bytes += seg.log_size
        if prev_next is not None and seg.base_offset != prev_next:
            if seg.base_offset > prev_next:
                rep.add(True, seg.log_path, 0,
                        f"offset gap across segments: offsets {prev_next}..{seg.base_offset - 1}"
                        f" are missing (the previous segment {os.path.basename(prev_path)} "
                        f"ends at {prev_next - 1})")
            else:
                rep.add(True, seg.log_path, 0,
                        f"segment overlaps the previous one: it starts at offset "
                        f"{seg.base_offset}, the previous ends at {prev_next - 1}")
        _check_batches(rep, seg, scan, active, clean)
        for kind in (DLY, OFFSET, TIME):
            _check_index(rep, seg, scan, kind, active, clean)
        prev_next, prev_path = scan.next_offset(), seg.log_path
    if only_base is None:
        _check_groups(rep, directory)
    return rep


def _scan_for_verify(seg: SegmentFiles, live_tail: bool,
                     progress: Progress | None) -> SegmentScan | None:
    try:
        scan = scan_segment(seg, progress=progress)
    except InspectError:
        if not os.path.exists(seg.log_path):
            return None
        raise
    if live_tail and scan.breaks and scan.breaks[-1].resume_at is None:
        # a writer may be mid-append: if the file has grown, look again up to its new end
        try:
            size = os.path.getsize(seg.log_path)
        except FileNotFoundError:
            return scan
        if size > seg.log_size:
            return scan_segment(SegmentFiles(seg.directory, seg.base_offset, size))
    return scan


def _check_batches(rep: VerifyReport, seg: SegmentFiles, scan: SegmentScan, active: bool,
                   clean: bool) -> None:
    path = seg.log_path
    expected = seg.base_offset
    items: list[Batch | FramingBreak] = sorted(
        [*scan.batches, *scan.breaks], key=lambda x: (x.position, isinstance(x, Batch)))
    after_break = False
    for item in items:
        if isinstance(item, FramingBreak):
            torn_tail = item.resume_at is None and active and not clean
            note = " (a torn tail from a crash: the next open truncates it)" if torn_tail else ""
            rep.add(True, path, item.position, item.describe() + note)
            after_break = True
            continue
        b = item
        if not b.crc_valid:
            rep.add(True, path, b.position,
                    f"CRC-32C mismatch in batch of offsets {b.base_offset}..{b.last_offset} "
                    f"({b.size} bytes)")
        if after_break and b.base_offset > expected:
            rep.add(True, path, b.position,
                    f"offsets {expected}..{b.base_offset - 1} are lost in the damaged bytes "
                    f"before this batch")
        elif b.base_offset != expected and not after_break:
            if b.base_offset > expected:
                msg = (f"offset gap: batch starts at offset {b.base_offset}, expected "
                       f"{expected} (offsets {expected}..{b.base_offset - 1} missing)")
            else:
                msg = (f"offsets go backwards: batch starts at offset {b.base_offset}, "
                       f"expected {expected}")
            if expected == seg.base_offset and b is scan.batches[0]:
                msg = (f"first batch starts at offset {b.base_offset} but the file name says "
                       f"{seg.base_offset}")
            rep.add(True, path, b.position, msg)
        after_break = False
        expected = b.last_offset + 1


_REBUILT = " (rebuilt from the .log on next open)"
# content errors under a sound header: Log.open checks only the header and checksums
_TRUSTED = " (Log.open would trust this index: run kdelay rebuild-index)"


def _index_is_stale_ok(active: bool, clean: bool) -> bool:
    """The active segment's indexes live in memory while the log is open (or was not
    closed cleanly): a missing or stale persisted copy is expected there."""
    return active and not clean


def _check_index(rep: VerifyReport, seg: SegmentFiles, scan: SegmentScan, kind: IndexKind,
                 active: bool, clean: bool) -> None:
    path = seg.path(kind.suffix)
    idx = read_index_file(path, kind)
    rep.indexes_checked += 1
    lenient = _index_is_stale_ok(active, clean)
    rebuilt = _REBUILT
    if idx.missing:
        if lenient:
            rep.add(False, path, None, "absent (the active segment's indexes are in memory "
                                       "while the log is open, or rebuilt after a crash)")
        else:
            rep.add(True, path, None, "missing" + rebuilt)
        return
    if idx.columns is None:
        rep.add(True, path, 0,
                "; ".join(idx.problems) + rebuilt)
        return
    meta = idx.meta
    assert meta is not None and idx.columns is not None
    if not idx.data_crc_ok:
        rep.add(True, path, HEADER_SIZE, "data checksum mismatch" + rebuilt)
        return
    if meta.base_offset != seg.base_offset:
        rep.add(True, path, 8, f"header says base offset {meta.base_offset}, the file name "
                               f"says {seg.base_offset}" + rebuilt)
        return
    covered = seg.log_size
    if meta.log_bytes != seg.log_size:
        stale = (f"stale: covers {meta.log_bytes} bytes of the log, which has "
                 f"{seg.log_size}")
        if not lenient:
            rep.add(True, path, 16, stale + rebuilt)
            return
        rep.add(False, path, None, stale + " (expected for the active segment of an open "
                                           "or crashed log; rebuilt on open)")
        boundaries = {b.position + b.size for b in scan.batches} | {0}
        if meta.log_bytes > seg.log_size or meta.log_bytes not in boundaries:
            return  # it describes bytes that are gone; nothing to compare
        covered = meta.log_bytes
    batches = [b for b in scan.batches if b.position + b.size <= covered]
    want_next = scan.next_offset(covered)
    if meta.next_offset != want_next:
        rep.add(True, path, 24, f"header says the segment ends before offset "
                                f"{meta.next_offset}, the log says {want_next}" + _TRUSTED)
    if kind is DLY:
        _compare_dly(rep, path, idx, batches)
    else:
        _check_sparse(rep, path, idx, batches, kind)


def _compare_dly(rep: VerifyReport, path: str, idx: IndexFile, batches: list[Batch]) -> None:
    """Entry by entry: what the index holds that the log does not, what the log holds that
    the index lacks, and (when both hold the same entries) whether the order is right."""
    want = expected_dly_columns(batches)
    have = idx.columns
    assert have is not None
    have_rows = list(zip(*(c.tolist() for c in have), strict=True))
    want_rows = list(zip(*(c.tolist() for c in want), strict=True))
    if have_rows == want_rows:
        return
    fields = "(deliver_after, offset, position, last_offset_delta, size)"
    want_set, have_set = set(want_rows), set(have_rows)
    extra = [i for i, r in enumerate(have_rows) if r not in want_set]
    lacking = [r for r in want_rows if r not in have_set]
    if extra:
        i = extra[0]
        rep.add(True, path, entry_file_position(idx, i),
                f"{plural(len(extra), 'entry', 'entries')} not matching any batch of the log; "
                f"first is entry {i}: {fields} = {have_rows[i]}" + _TRUSTED)
    if lacking:
        rep.add(True, path, None,
                f"{plural(len(lacking), 'batch', 'batches')} of the log without an entry; "
                f"first: {fields} = {lacking[0]}" + _TRUSTED)
    if not extra and not lacking:
        i = next(i for i, (a, b) in enumerate(zip(have_rows, want_rows, strict=True))
                 if a != b)
        rep.add(True, path, entry_file_position(idx, i),
                f"entries out of (deliver_after, offset) order from entry {i}" + _TRUSTED)


def _check_sparse(rep: VerifyReport, path: str, idx: IndexFile, batches: list[Batch],
                  kind: IndexKind) -> None:
    """Offset and time index entries are sparse: each must name a real batch start."""
    by_base = {b.base_offset: b for b in batches}
    running_max: dict[int, int] = {}
    m = -1 << 63
    for b in batches:
        m = max(m, b.header.max_timestamp)
        running_max[b.base_offset] = m
    assert idx.columns is not None
    keys = idx.columns[0]
    if len(keys) > 1 and not bool((np.diff(keys) > 0).all()):
        i = int(np.flatnonzero(np.diff(keys) <= 0)[0]) + 1
        rep.add(True, path, entry_file_position(idx, i),
                f"entry {i}: keys are not increasing")
        return
    for i, (a, b) in enumerate(zip(idx.columns[0].tolist(), idx.columns[1].tolist(),
                                   strict=True)):
        if kind is OFFSET:
            offset, position = a, b
            batch = by_base.get(offset)
            if batch is None or batch.position != position:
                what = ("no batch starts at that offset" if batch is None else
                        f"that batch starts at byte {batch.position}")
                rep.add(True, path, entry_file_position(idx, i),
                        f"entry {i} maps offset {offset} to log byte {position}, but {what}")
                return
        else:
            ts, offset = a, b
            if offset not in by_base:
                rep.add(True, path, entry_file_position(idx, i),
                        f"entry {i} names offset {offset}, where no batch starts")
                return
            if ts != running_max[offset]:
                rep.add(True, path, entry_file_position(idx, i),
                        f"entry {i} says timestamp {ts} at offset {offset}, the log's max "
                        f"timestamp there is {running_max[offset]}")
                return


def _check_groups(rep: VerifyReport, directory: str) -> None:
    store = GroupStore(directory)  # reads only: a store creates nothing until a commit
    for group in store.groups():
        try:
            store.committed(group)
        except KdelayError as e:
            rep.add(True, store.path(group), 0, f"consumer group position unreadable: {e}")


# ---------------------------------------------------------------------------- stats

FORECAST = (("within_1m", 60_000), ("within_1h", 3_600_000), ("within_1d", 86_400_000))


@dataclass
class SegmentSummary:
    """Per-batch (deliver_after, base_offset, last_offset_delta) of one segment, from its
    persisted DeliverAfterIndex when current, else from a walk of the .log's headers."""

    segment: SegmentFiles
    deliver_after: np.ndarray
    base: np.ndarray
    lod: np.ndarray
    from_index: bool
    next_offset: int
    damaged: bool = False


def summarize_segment(seg: SegmentFiles, progress: Progress | None = None) -> SegmentSummary:
    idx = read_index_file(seg.path(DLYINDEX_SUFFIX), DLY)
    if (not idx.problems and idx.meta is not None and idx.columns is not None
            and idx.meta.base_offset == seg.base_offset and idx.meta.log_bytes == seg.log_size):
        da, base, _, lod, _ = idx.columns
        if progress:
            progress(seg.log_size)
        return SegmentSummary(seg, da.astype(np.int64), base.astype(np.int64),
                              lod.astype(np.int64), True, idx.meta.next_offset)
    scan = scan_segment(seg, check_crc=False, progress=progress)
    da = np.array([b.header.deliver_after for b in scan.batches], dtype=np.int64)
    base = np.array([b.base_offset for b in scan.batches], dtype=np.int64)
    lod = np.array([b.header.last_offset_delta for b in scan.batches], dtype=np.int64)
    return SegmentSummary(seg, da, base, lod, False, scan.next_offset(), bool(scan.breaks))


def partition_stats(directory: str, now: int, progress: Progress | None = None) -> dict:
    segments = list_segments(directory)
    sums = [summarize_segment(s, progress) for s in segments]
    da = np.concatenate([s.deliver_after for s in sums]) if sums else np.empty(0, np.int64)
    base = np.concatenate([s.base for s in sums]) if sums else np.empty(0, np.int64)
    counts = (np.concatenate([s.lod for s in sums]) + 1) if sums else np.empty(0, np.int64)
    pending_mask = da > now
    records = int(counts.sum())
    pending = int(counts[pending_mask].sum())
    forecast = {name: int(counts[pending_mask & (da <= now + ms)].sum())
                for name, ms in FORECAST}
    forecast["beyond_1d"] = int(counts[da > now + FORECAST[-1][1]].sum())
    groups = []
    for name, key in _read_groups(directory):
        lag = None
        if key is not None:
            lag = _records_after(key, da, base, counts, now)
        else:
            lag = int(counts[~pending_mask].sum())
        groups.append({"group": name,
                       "deliver_after": None if key is None else key[0],
                       "offset": None if key is None else key[1],
                       "due_not_consumed": lag})
    clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    return {
        "path": directory,
        "now": now,
        "segments": len(segments),
        "log_start_offset": segments[0].base_offset if segments else 0,
        "log_end_offset": sums[-1].next_offset if sums else 0,
        "records": records,
        "batches": int(len(da)),
        "bytes": sum(s.log_size for s in segments),
        "index_bytes": _index_bytes(segments),
        "due_records": records - pending,
        "pending_records": pending,
        "earliest_pending_deliver_after": int(da[pending_mask].min()) if pending else None,
        "latest_deliver_after": int(da.max()) if len(da) else None,
        "forecast": forecast,
        "segments_from_index": sum(s.from_index for s in sums),
        "segments_scanned": sum(not s.from_index for s in sums),
        "damaged_segments": [s.segment.log_path for s in sums if s.damaged],
        "clean_shutdown": clean,
        "recovery_point": read_recovery_point(directory),
        "groups": groups,
    }


def _records_after(key: tuple[int, int], da: np.ndarray, base: np.ndarray,
                   counts: np.ndarray, now: int) -> int:
    """Due records whose (deliver_after, offset) is after `key`."""
    kda, koff = key
    due = da <= now
    later = due & (da > kda)
    n = int(counts[later].sum())
    same = due & (da == kda)
    last = base + counts - 1
    n += int(np.clip(last[same] - np.maximum(base[same], koff + 1) + 1, 0, None).sum())
    return n


def _read_groups(directory: str) -> list[tuple[str, tuple[int, int] | None]]:
    """Every readable group position (unreadable ones are verify's business)."""
    store = GroupStore(directory)
    out = []
    for group in store.groups():
        try:
            key = store.committed(group)
        except KdelayError:
            continue
        out.append((group, None if key is None else (key.deliver_after, key.offset)))
    return out


def _index_bytes(segments: list[SegmentFiles]) -> int:
    total = 0
    for s in segments:
        for suffix in KINDS:
            with contextlib.suppress(OSError):
                total += os.path.getsize(s.path(suffix))
    return total
