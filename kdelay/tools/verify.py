"""`kdelay verify`: check every batch's CRC, offset continuity within and across segments,
the consumer group files, every persisted index against what its .log says (the index
checks are in verify_index.py), and each segment's cancellation files (tools/cancels.py).
Only reads; safe on a live log."""

from __future__ import annotations

import argparse
import os

from ..errors import KdelayError
from ..fetch.group_positions import GroupStore
from ..fetch.queue_state import state_store
from ..log.batch.offset_continuity import continues
from ..log.batch.walker import Batch, FramingBreak, Progress, base_offsets_crc
from ..log.compaction.swap_watch import between_swaps
from ..log.segments import append_horizon, layout
from ..log.segments.layout import LOG_SUFFIX, SegmentFiles, parse_segment_name, segment_file
from ..log.segments.live_tail import in_flight_message
from . import cancels
from .formatting import Out
from .progress import ProgressBar, fmt_size
from .scanning import (
    DLY,
    KINDS,
    OFFSET,
    TIME,
    InspectError,
    SegmentScan,
    VerifyReport,
    existing,
    in_flight,
    in_motion,
    list_segments,
    partition_dirs,
    scan_segment,
    settle,
)
from .verify_index import check_index

EXIT_OK, EXIT_PROBLEMS = 0, 1
SWAP_WAIT_S = 10.0  # how long a check waits for a live compaction's swap to finish


def verify_partition(directory: str, *, only_base: int | None = None,
                     progress: Progress | None = None) -> VerifyReport:
    """Check every batch's CRC, offset continuity within and across segments, and every
    persisted index against what its .log says. Only reads. On a live log a problem only
    counts if it is still there when checked again (see scanning.settle); the others are
    kept as information."""
    def run(first: bool) -> VerifyReport:
        return _verify_once(directory, only_base, progress if first else None)

    def keys(rep: VerifyReport) -> set:
        return {(f.path, f.position, f.message) for f in rep.problems}

    rep, persistent = settle(directory, run, keys)
    for f in rep.problems:
        if (f.path, f.position, f.message) not in persistent:
            f.problem = False
            f.message = in_motion(f.message)
    return rep


def _verify_once(directory: str, only_base: int | None, progress: Progress | None
                 ) -> VerifyReport:
    rep = VerifyReport(directory)
    # mid-swap a compaction's new indexes sit beside the old .log: check once it is done
    # (one left half done by a crash is reported below; the next open completes it)
    between_swaps(directory, SWAP_WAIT_S)
    segments = list_segments(directory)
    clean = os.path.exists(os.path.join(directory, layout.CLEAN_SHUTDOWN_FILE))
    if not segments:
        rep.add(False, directory, None, "no segments (an empty log)")
        return rep
    if only_base is None:
        for name in layout.leftover_files(directory):
            rep.add(False, os.path.join(directory, name), None,
                    "leftover file (removed on next open)")
        for name in layout.compaction_in_progress(directory):
            rep.add(False, os.path.join(directory, name), None,
                    "a compaction's replacement segment file (a compaction is running, or "
                    "was interrupted: the next open finishes or undoes it)")
    prev_next: int | None = None
    prev_path = ""
    for i, seg in enumerate(segments):
        active = i == len(segments) - 1
        if only_base is not None and seg.base_offset != only_base:
            continue  # one segment asked for: its neighbours are not read
        scan = _scan_for_verify(seg, active and not clean, progress)
        if scan is None:
            rep.add(False, seg.log_path, None, "segment deleted during the check (retention)")
            prev_next = None  # its successor continues what retention left, not a gap
            continue
        rep.segments += 1
        rep.batches += len(scan.batches)
        rep.records += scan.records
        rep.bytes += seg.log_size
        # the segment before ends where its last batch does, or (compacted) its marker says
        if prev_next is not None and not continues(seg.base_offset, prev_next, False):
            if seg.base_offset > prev_next:
                rep.add(True, seg.log_path, 0,
                        f"offset gap across segments: offsets {prev_next}..{seg.base_offset - 1}"
                        f" are missing (the previous segment {os.path.basename(prev_path)} "
                        f"ends at {prev_next - 1})")
            else:
                rep.add(True, seg.log_path, 0,
                        f"segment overlaps the previous one: it starts at offset "
                        f"{seg.base_offset}, the previous ends at {prev_next - 1}")
        if scan.marker_damaged:
            rep.add(True, seg.path(layout.MARKER_SUFFIX), 0,
                    "compaction marker unreadable (the next open rewrites it from the next "
                    "segment's base offset)")
        _check_batches(rep, seg, scan, active, clean)
        for kind in (DLY, OFFSET, TIME):
            check_index(rep, seg, scan, kind, active, clean)
        cancels.check_segment(rep, directory, seg.base_offset, scan.next_offset())
        prev_next, prev_path = scan.next_offset(), seg.log_path
    if only_base is None:
        _check_groups(rep, directory, prev_next)
        bad = append_horizon.check_file(directory)
        if bad is not None:
            rep.add(False, os.path.join(directory, append_horizon.HORIZON_FILE), None,
                    f"append horizon unreadable ({bad}): lock-free readers treat it as no "
                    f"writer; the next open rewrites it")
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
    # compaction removes records: in a segment it rewrote (and only there) offsets may
    # skip forward, but every batch must still lie before the end its marker gives
    compacted = scan.end_offset is not None
    items: list[Batch | FramingBreak] = sorted(
        [*scan.batches, *scan.breaks], key=lambda x: (x.position, isinstance(x, Batch)))
    after_break = False
    for item in items:
        if isinstance(item, FramingBreak):
            torn_tail = item.resume_at is None and active and not clean
            if torn_tail and in_flight(seg, item):
                rep.add(False, path, item.position,
                        in_flight_message(item.position, item.file_size))
                continue
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
        elif not after_break and not continues(b.base_offset, expected, compacted):
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
        if compacted and b.last_offset >= scan.end_offset:
            rep.add(True, path, b.position,
                    f"batch of offsets {b.base_offset}..{b.last_offset} lies past the end "
                    f"offset {scan.end_offset} of this compacted segment")
        after_break = False
        expected = b.last_offset + 1
    if (scan.bases_crc is not None and not scan.breaks
            and base_offsets_crc([b.entry() for b in scan.batches]) != scan.bases_crc):
        rep.add(True, path, 0, "batch base offsets differ from those compaction wrote (the "
                "checksum in its marker): one is damaged; once its indexes are rebuilt, the "
                "segment reads as empty")


def _check_groups(rep: VerifyReport, directory: str, log_end: int | None) -> None:
    store = GroupStore(directory)  # reads only: a store creates nothing until a commit
    for group in store.groups():
        try:
            store.committed(group)
        except KdelayError as e:
            rep.add(True, store.path(group), 0, f"consumer group position unreadable: {e}")
    for group in state_store.group_names(directory):
        for problem, path, position, message in state_store.verify_group(directory, group,
                                                                         log_end):
            rep.add(problem, path, position, f"queue group {group!r}: {message}")



def _verify_targets(path: str) -> list[tuple[str, int | None]]:
    existing(path)
    if os.path.isdir(path):
        return [(d, None) for d in partition_dirs(path)]
    parsed = parse_segment_name(os.path.basename(path))
    if parsed is None or (parsed[1] != LOG_SUFFIX and parsed[1] not in KINDS):
        raise InspectError(f"{path}: not a kdelay segment file (want a partition "
                               f"directory, or a <20-digit offset>.log/.index/.timeindex/"
                               f".dlyindex file)")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(segment_file(directory, parsed[0], LOG_SUFFIX)):
        raise InspectError(f"{path}: its segment has no .log file")
    return [(os.path.dirname(path) or ".", parsed[0])]



def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    targets = _verify_targets(args.path)
    total = sum(s.log_size for d, only in targets for s in list_segments(d)
                if only is None or s.base_offset == only)
    bar = ProgressBar("verify", 0 if args.quiet else total)  # -q: no bar either
    reports = []
    try:
        for directory, only in targets:
            rep = verify_partition(directory, only_base=only, progress=bar)
            reports.append(rep)
            bar.close()
            if not args.json:
                for f in rep.findings:
                    if f.problem or not args.quiet:
                        out.line(f.line())
    finally:
        bar.close()
    problems = sum(len(r.problems) for r in reports)
    if args.json:
        out.json({
            "ok": problems == 0, "problems": problems,
            "partitions": [{
                "path": r.directory, "ok": r.ok, "segments": r.segments, "batches": r.batches,
                "records": r.records, "bytes": r.bytes, "indexes_checked": r.indexes_checked,
                "findings": [f.as_dict() for f in r.findings]} for r in reports]})
    else:
        segs = sum(r.segments for r in reports)
        nbytes = sum(r.bytes for r in reports)
        what = (f"{len(reports)} partition{'s' if len(reports) != 1 else ''}, {segs} segments, "
                f"{sum(r.batches for r in reports)} batches, "
                f"{sum(r.records for r in reports)} records, {fmt_size(nbytes)}, "
                f"{sum(r.indexes_checked for r in reports)} indexes")
        out.line(f"{'OK' if not problems else 'DAMAGED'}: {what}"
                 + (f"; {problems} problem{'s' if problems != 1 else ''}" if problems else ""))
    return EXIT_PROBLEMS if problems else EXIT_OK

