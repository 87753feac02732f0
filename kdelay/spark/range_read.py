"""Reading one planned key range of a partition for the streaming source, consistently
beside a compaction or retention.

A micro-batch is planned on the driver (live.py's catalogue says which batches, in which
segment, at which position) and read later in a worker. In between, compaction may swap a
rewritten segment in (its batches at other positions, some records gone; merged
neighbours' .log files deleted) and retention may delete a segment. So each run of
batches is read through one descriptor and checked against the plan
(entry_check.check_batch), and its cancellations, read after its bytes, are trusted only
if the .log is still the file read (compaction prunes a segment's cancellations after
its swap). When anything differs, the rest of the range (after the last record handed
on) is read again from a catalogue of the files as they are now (live.settled).
Compaction keeps every record it does not remove with its key (deliverAfter, offset), so
the result is every planned record still in the log, in key order, none twice; the
records compaction or retention removed meanwhile (cancelled, or due longer than
`retention_ms` ago) are left out, as those rules allow. A batch that fails its check
against a catalogue of the very file it reads is damage: CorruptLogError.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from ..errors import CorruptLogError, KdelayError
from ..index.entry import Entry
from ..log.batch.entry_check import check_batch
from ..log.batch.walker import HeaderColumns
from ..log.cancellation.journal import read_cancelled
from ..log.segments.layout import PartitionDir
from ..read_ranges import coalesce
from . import columnar, scan
from .live import settled
from .segment_bytes import FileIdent, SegmentBytes, open_segment

Key = tuple[int, int]
CHANGES = 20  # fresh catalogues one read may take before it gives up
SETTLE_S = 30.0  # how long a read waits for a compaction's swap to finish


class _Changed(Exception):
    """The files are not the ones the read was planned against."""


def read_range(part: PartitionDir, start: Key, end: Key, batches: Sequence[tuple]
               ) -> Iterator[pa.RecordBatch]:
    """The records of `batches` (in key order) whose key is in (start, end], cancelled ones
    left out, as Arrow batches in key order (see the module docstring)."""
    done = start
    inodes: dict[int, FileIdent] | None = None  # of the files a fresh catalogue listed
    for _ in range(CHANGES):
        try:
            for rows, last in _runs(part, done, end, batches, inodes):
                yield from rows
                done = last
            return
        except _Changed:
            live, _ = settled(part, done, SETTLE_S)
            damage = live.damaged()
            if damage is not None:
                raise CorruptLogError("batch is damaged (CRC, framing or offset)",
                                      *damage) from None
            batches, inodes = live.between(done, end), live.inodes()
    raise KdelayError(f"{part.path}: the log changed underneath the read of keys after "
                      f"{done} up to {end} {CHANGES} times over; giving up")


def _runs(part: PartitionDir, start: Key, end: Key, batches: Sequence[tuple],
          inodes: dict[int, FileIdent] | None) -> Iterator[tuple[Iterator[pa.RecordBatch], Key]]:
    """Per run of batches of one segment (read into one buffer): its rows, still to be
    decoded, and the key of its last record, once every check has passed. Raises
    _Changed when the files differ from the plan (with `inodes`, from a catalogue of the
    files as they are: when the file read is not the one catalogued)."""
    topic, pnum = part.topic, part.partition
    segments = np.array([b[3] for b in batches], dtype=np.int64)
    sizes = np.array([b[5] for b in batches], dtype=np.int64)
    ends = np.cumsum(sizes)  # where each batch ends, packed in buffers
    other_segment = np.ones(len(batches), dtype=bool)
    other_segment[1:] = segments[1:] != segments[:-1]
    sources: dict[int, SegmentBytes] = {}
    try:
        for i, j in coalesce(ends - sizes, ends, max_span=scan.CHUNK_BYTES,
                             apart=other_segment):
            run = batches[i:j]
            seg = run[0][3]
            total = int(ends[j - 1] - ends[i] + sizes[i])
            src = sources.get(seg)
            if src is None:
                src = sources[seg] = _open(part.path, seg,
                                           None if inodes is None else inodes.get(seg, -1))
            path = src.path
            buf = bytearray(total)
            rels, headers, positions = [], [], []
            rel = 0
            gots = src.gather([b[4] for b in run], [b[5] for b in run], buf)
            for (da, base, last, _, pos, size), got in zip(run, gots, strict=True):
                try:  # only what was read: a batch cut short is truncated, not zeros
                    h = check_batch(memoryview(buf)[:rel + got], rel,
                                    Entry(da, base, pos, last - base, size), path=path)
                except CorruptLogError:
                    if inodes is None:
                        raise _Changed from None  # planned earlier: maybe rewritten since
                    raise  # checked against a catalogue of this very file: damage
                rels.append(rel)
                headers.append(h)
                positions.append(pos)
                rel += size
            # read after planning: a cancel that could still take one of these records
            # would have held the planning bound below it (see append_horizon.py)
            cancelled = read_cancelled(part.path, seg)
            if not src.still_current():
                raise _Changed  # swapped since: those may be the new file's cancellations
            chunk = columnar.Chunk(buf, HeaderColumns.of(rels, headers),
                                   np.array(positions, dtype=np.int64), np.ones(len(run), bool))
            straddles = (run[0][0], run[0][1]) <= start or (run[-1][0], run[-1][2]) > end
            yield (_rows(chunk, seg, path, topic, pnum, cancelled,
                         (start, end) if straddles else None), (run[-1][0], run[-1][2]))
    finally:
        for src in sources.values():
            src.close()


def _open(directory: str, base: int, ident: FileIdent | None) -> SegmentBytes:
    """The segment's bytes (local, or its remote copy); _Changed if it is gone, or
    (`ident` given: live.segment_ident of the catalogue) is not the file catalogued."""
    src = open_segment(directory, base)
    if src is None:
        raise _Changed  # deleted since planning (retention, or merged away)
    if ident is not None and not src.is_file(ident):
        src.close()
        raise _Changed
    return src


def _rows(chunk: columnar.Chunk, seg: int, path: str, topic: str | None, pnum: int | None,
          cancelled: np.ndarray, bounds: tuple[Key, Key] | None) -> Iterator[pa.RecordBatch]:
    """A run's records as Arrow batches: those in `bounds` (None: all), cancelled ones
    left out."""
    for rb in columnar.records_to_arrow(chunk, segment=seg, topic=topic, partition=pnum,
                                        log_path=path, cancelled=cancelled):
        keep = _in_range(rb, *bounds) if bounds is not None else None
        if len(cancelled):
            live = ~rb.column("cancelled").to_numpy(zero_copy_only=False)
            keep = live if keep is None else keep & live
        if keep is not None:
            rb = rb.filter(pa.array(keep))
        if rb.num_rows:
            yield rb


def _in_range(rb: pa.RecordBatch, start: Key, end: Key):
    da = rb.column("deliver_after").to_numpy()
    off = rb.column("offset").to_numpy()
    after = (da > start[0]) | ((da == start[0]) & (off > start[1]))
    upto = (da < end[0]) | ((da == end[0]) & (off <= end[1]))
    return after & upto
