"""`kdelay verify`: check every batch's CRC, offset continuity within and across segments,
the consumer group files, every persisted index against what its .log says (the index
checks are in verify_index.py), each segment's cancellation files (tools/cancels.py), and
the broker's files in a partition (verify_view.py, verify_producers.py).
Only reads; safe on a live log."""

from __future__ import annotations

import argparse
import os

from .. import fsio
from ..errors import CorruptLogError
from ..groups import journal_format, position_file
from ..groups.legacy_positions import LegacyFile, read_legacy
from ..groups.positions import GROUPS_DIR, JOURNAL_FILE
from ..groups.queue import state_store
from ..log.batch import codec
from ..log.batch.offset_continuity import continues
from ..log.batch.walker import Progress
from ..log.compaction.swap_watch import between_swaps
from ..log.segments import append_horizon, layout
from ..log.segments.layout import LOG_SUFFIX, SegmentFiles, parse_segment_name, segment_file
from ..log.tiered import inventory
from ..settle import in_motion, settle
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
    list_segments,
    partition_dirs,
    scan_segment,
)
from .verify_batches import check_batches
from .verify_broker import check_broker_files
from .verify_index import check_index
from .verify_producers import check_producer_snapshot
from .verify_remote import check_remote
from .verify_view import check_view

EXIT_OK, EXIT_PROBLEMS = 0, 1
SWAP_WAIT_S = 10.0  # how long a check waits for a live compaction's swap to finish


def verify_partition(directory: str, *, only_base: int | None = None,
                     progress: Progress | None = None) -> VerifyReport:
    """Check every batch's CRC, offset continuity within and across segments, and every
    persisted index against what its .log says. Only reads. On a live log a problem only
    counts if it is still there when checked again (see kdelay/settle.py); the others are
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
    names = between_swaps(directory, SWAP_WAIT_S)
    if names is None:
        names = os.listdir(directory)
    listing = layout.classify(names)
    clean = os.path.exists(os.path.join(directory, layout.CLEAN_SHUTDOWN_FILE))
    if not listing.local:
        rep.add(False, directory, None, "no segments (an empty log)")
        return rep
    damaged: list[CorruptLogError] = []  # a segment with a damaged marker: as if it had none
    segments = inventory.list_all_segments(directory, damaged=damaged, listing=listing)
    for e in damaged:
        rep.add(True, e.path or directory, None, e.reason)
    if only_base is None:
        for name in listing.leftovers:
            rep.add(False, os.path.join(directory, name), None,
                    "leftover file (removed on next open)")
        for name in layout.compaction_in_progress(names):
            rep.add(False, os.path.join(directory, name), None,
                    "a compaction's replacement segment file (a compaction is running, or "
                    "was interrupted: the next open finishes or undoes it)")
    prev_next: int | None = None
    prev_path = ""
    batches: list[tuple[int, int, int]] = []  # (base, last, deliverAfter): the view's check
    # base -> (producer id, epoch, first sequence): the producer-state snapshot's check
    producer_batches: dict[int, tuple[int, int, int]] = {}
    for listed in segments:
        active = listed is segments[-1]
        if only_base is not None and listed.base_offset != only_base:
            continue  # one segment asked for: its neighbours are not read
        if listed.remote_only:  # its bytes are in the store: --remote checks them
            copy = listed.remote
            assert copy is not None
            remote_path = segment_file(directory, copy.base_offset, layout.REMOTE_SUFFIX)
            _check_continues(rep, copy.base_offset, prev_next, prev_path, remote_path)
            rep.add(False, remote_path, None,
                    f"offsets {copy.base_offset}..{copy.next_offset - 1} are held only in "
                    f"the object store (kdelay verify --remote checks them)")
            cancels.check_segment(rep, directory, copy.base_offset, copy.next_offset)
            prev_next, prev_path = copy.next_offset, remote_path
            continue
        assert listed.log_size is not None
        seg = SegmentFiles(directory, listed.base_offset, listed.log_size)
        scan = _scan_for_verify(seg, active and not clean, progress)
        if scan is None:
            rep.add(False, seg.log_path, None, "segment deleted during the check (retention)")
            prev_next = None  # its successor continues what retention left, not a gap
            continue
        rep.segments += 1
        rep.batches += len(scan.batches)
        rep.records += scan.records
        rep.bytes += seg.log_size
        _check_continues(rep, seg.base_offset, prev_next, prev_path, seg.log_path)
        if scan.marker_damaged:
            rep.add(True, seg.path(layout.MARKER_SUFFIX), 0,
                    "compaction marker unreadable (the next open rewrites it from the next "
                    "segment's base offset)")
        check_batches(rep, seg, scan, active, clean)
        if active and not clean:
            _check_last_client_batch(rep, seg.log_path, scan)
        batches += [(b.header.base_offset, b.last_offset, b.header.deliver_after)
                    for b in scan.batches]
        producer_batches.update(
            (b.header.base_offset, (b.header.producer_id, b.header.producer_epoch,
                                    b.header.base_sequence))
            for b in scan.batches if b.header.producer_id >= 0)
        for kind in (DLY, OFFSET, TIME):
            check_index(rep, seg, scan, kind, active, clean)
        cancels.check_segment(rep, directory, seg.base_offset, scan.next_offset())
        prev_next, prev_path = scan.next_offset(), seg.log_path
    if only_base is None:
        _check_groups(rep, directory, prev_next)
        check_view(rep, directory, batches)
        check_producer_snapshot(rep, directory, producer_batches, prev_next)
        bad = append_horizon.check_file(directory)
        if bad is not None:
            rep.add(False, os.path.join(directory, append_horizon.HORIZON_FILE), None,
                    f"append horizon unreadable ({bad}): lock-free readers treat it as no "
                    f"writer; the next open rewrites it")
    return rep


def _check_continues(rep: VerifyReport, base: int, prev_next: int | None, prev_path: str,
                     path: str) -> None:
    """The segment before ends where its last batch does, or (compacted) its marker says:
    this one must start there."""
    if prev_next is None or continues(base, prev_next, False):
        return
    if base > prev_next:
        rep.add(True, path, 0,
                f"offset gap across segments: offsets {prev_next}..{base - 1} are missing (the "
                f"previous segment {os.path.basename(prev_path)} ends at {prev_next - 1})")
    else:
        rep.add(True, path, 0, f"segment overlaps the previous one: it starts at offset "
                               f"{base}, the previous ends at {prev_next - 1}")


def _check_last_client_batch(rep: VerifyReport, path: str, scan: SegmentScan) -> None:
    """A crashed log whose last batches carry codec.MORE_RUNS holds the first runs of a
    client batch whose write was torn (or, live, is under way): information, as the next
    open cuts them off (LogSegment.recover)."""
    i = len(scan.batches)
    while i > 0 and scan.batches[i - 1].header.attributes & codec.MORE_RUNS:
        i -= 1
    if i < len(scan.batches):
        b = scan.batches[i]
        rep.add(False, path, b.position,
                f"the last client batch (from offset {b.header.base_offset}) lacks its last "
                f"run (a torn write, or one under way): the next open cuts it off")


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


def _check_groups(rep: VerifyReport, directory: str, log_end: int | None) -> None:
    _check_commit_journal(rep, os.path.join(directory, GROUPS_DIR, JOURNAL_FILE))
    for old in read_legacy(os.path.join(directory, GROUPS_DIR)):
        _check_position_file(rep, old)
    for group in state_store.group_names(directory):
        for problem, path, position, message in state_store.verify_group(directory, group,
                                                                         log_end):
            rep.add(problem, path, position, f"queue group {group!r}: {message}")


def _check_commit_journal(rep: VerifyReport, path: str) -> None:
    """The consumer groups' commit journal (groups/journal_format.py): damage that a crash
    cannot leave is a problem (no group position on the log can be trusted); a torn tail
    (a commit a crash interrupted, or one under way in a live log) is noted."""
    raw = fsio.read_small(path)
    if raw is None:
        return
    found = journal_format.scan(raw, path)
    if found.damage is not None:
        rep.add(True, path, found.damage.position,
                f"consumer group positions unreadable: {found.damage.reason}")
    elif found.torn is not None:
        rep.add(False, path, found.torn[0],
                f"consumer group commit journal: torn tail of {found.torn[1]} bytes (a "
                f"commit a crash interrupted, never acknowledged, or one under way); cut "
                f"off at the next commit")


def _check_position_file(rep: VerifyReport, old: LegacyFile) -> None:
    """Both slots of a consumer group's position file of an earlier version
    (groups/position_file.py; folded into the journal at the log's next commit): neither
    valid is a problem (the group's position is lost); one damaged is noted, since a commit
    that a crash interrupted leaves just that (its position is the other slot's)."""
    group, path, file = old.group, old.path, old.file
    try:
        current = position_file.current_or_raise(file, path)
    except CorruptLogError as e:
        rep.add(True, path, 0, f"consumer group {group!r} position unreadable: {e.reason}")
        return
    for i, damage in enumerate(file.damage):
        if damage:
            rep.add(False, path, position_file.slot_position(i),
                    f"consumer group {group!r}: slot {i} unreadable ({damage}); the position "
                    f"is the other slot's (commit {current.sequence}): a commit a crash "
                    f"interrupted, or damage")


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
            if args.remote and only is None:
                check_remote(rep, directory)
            reports.append(rep)
            bar.close()
            if not args.json:
                for f in rep.findings:
                    if f.problem or not args.quiet:
                        out.line(f.line())
    finally:
        bar.close()
    broker = check_broker_files(args.path) if os.path.isdir(args.path) else None
    if broker is not None and not args.json:
        for f in broker.findings:
            if f.problem or not args.quiet:
                out.line(f.line())
    problems = sum(len(r.problems) for r in reports) + (
        len(broker.problems) if broker is not None else 0)
    if args.json:
        out.json({
            "ok": problems == 0, "problems": problems,
            "partitions": [{
                "path": r.directory, "ok": r.ok, "segments": r.segments, "batches": r.batches,
                "records": r.records, "bytes": r.bytes, "indexes_checked": r.indexes_checked,
                "remote_copies": r.remote_copies, "findings": [f.as_dict() for f in r.findings]} for r in reports],
            **({"broker_files": [f.as_dict() for f in broker.findings]}
               if broker is not None else {})})
    else:
        segs = sum(r.segments for r in reports)
        nbytes = sum(r.bytes for r in reports)
        what = (f"{len(reports)} partition{'s' if len(reports) != 1 else ''}, {segs} segments, "
                f"{sum(r.batches for r in reports)} batches, "
                f"{sum(r.records for r in reports)} records, {fmt_size(nbytes)}, "
                f"{sum(r.indexes_checked for r in reports)} indexes")
        copies = sum(r.remote_copies for r in reports)
        if args.remote:
            what += f", {copies} remote cop{'y' if copies == 1 else 'ies'}"
        out.line(f"{'OK' if not problems else 'DAMAGED'}: {what}"
                 + (f"; {problems} problem{'s' if problems != 1 else ''}" if problems else ""))
    return EXIT_PROBLEMS if problems else EXIT_OK

