"""LogLoader: turn a partition directory into open segments, recovering it if needed.

After a clean close (the marker file is present) every segment opens from its persisted
indexes and no log data is read; the sealed ones the segment summary describes
(segment_summary.py) open with none of their indexes read, each loaded and checked on
first use (deferred_indexes.py), as Kafka loads its indexes lazily; when the directory
still holds exactly the files that close listed, they are not even listed or made one by
one, but taken from the summary's columns and made on first use (summary_open.py). After
an unclean shutdown, segments at or past the recovery point (the part not known to be
fsync'd) are scanned batch by batch with CRCs and cut at the first torn or corrupt batch;
segments before it keep their indexes, and any index that is missing, stale or corrupt is
rebuilt from its .log and persisted again.

Small files this module owns (each replaced atomically, fsio.atomic_write):
- `recovery-point-offset-checkpoint` (kdelay/log/segments/recovery_point.py): offsets below
  it are known fsync'd; anything unreadable means 0.
- `.kdelay_cleanshutdown`: written last by a clean close; its ASCII decimal body is the
  log clock then (empty or unreadable: 0). Removed before the first change after open.
- `.lock`: the directory lock (directory_lock.py).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ... import fsio
from ...errors import CorruptLogError, IndexFileError, RemoteStorageError
from ..compaction import swap
from ..segments.layout import (
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    COMPANION_SUFFIXES,
    LOG_SUFFIX,
    MARKER_SUFFIX,
    SWAP_SUFFIX,
    Listing,
    classify,
    segment_file,
)
from ..segments.recovery_point import read_recovery_point, write_recovery_point
from ..segments.segment import LogSegment
from ..segments.segment_set import Summarised
from ..segments.segment_summary import SegmentSummary, SummaryFile, read_summary_file
from .deferred_indexes import DeferredIndexes
from .directory_lock import take_lock
from .summary_open import open_summarised, vouched_summary

log = logging.getLogger("kdelay")

@dataclass
class LoadReport:
    clean: bool = True
    segments_scanned: int = 0
    bytes_scanned: int = 0
    bytes_truncated: int = 0
    indexes_rebuilt: int = 0
    orphans_removed: int = 0
    problems: list[str] = field(default_factory=list)
    swaps: list[str] = field(default_factory=list)  # interrupted compactions finished/undone
    # the indexes a clean open left to load on first use (None: none)
    deferred: DeferredIndexes | None = field(default=None, repr=False, compare=False)
    # the directory as the open listed it (after tidying)
    listing: Listing | None = field(default=None, repr=False, compare=False)
    # the sealed segments a clean open left as summary rows, made on first use (None: all
    # made at open; see summary_open.py)
    summarised: Summarised | None = field(default=None, repr=False, compare=False)

    def finish_deferred(self) -> None:
        """Load and check every index the open deferred, so that this report says all the
        damage there is (each repair or failure counted and named as at open).
        O(segments deferred) the first time, O(1) after."""
        if self.deferred is not None:
            self.deferred.finish()


def read_clock_floor(directory: str) -> int:
    """The log clock at the last clean close, kept in the clean-shutdown marker (0 if the
    marker is absent, unreadable, or predates this field)."""
    raw = fsio.read_small(os.path.join(directory, CLEAN_SHUTDOWN_FILE)) or b""
    try:
        return max(0, int(raw.decode("ascii").strip() or 0))
    except (UnicodeDecodeError, ValueError):
        return 0


class TieredOpening(Protocol):
    """What the loader asks of tiered storage (kdelay.log.tiered.opening.TieredDirectory,
    passed in: this layer does not import that one)."""

    problems: list[str]

    def adopt(self) -> list[int]: ...

    def committed_copy(self, base: int): ...  # RemoteCopy | None

    def remote_segment(self, base: int): ...  # RemoteSegment


class OpenedDirectory(NamedTuple):
    lock_fd: int                # holds the directory's lock
    segments: list  # LogSegments and RemoteSegments; the last (a LogSegment) is the active one
    report: LoadReport
    marker_present: bool        # the clean-shutdown marker is still on disk
    clock_floor: int            # the log clock at the last clean close (0: unknown)


def open_directory(directory: str, index_interval_bytes: int,
                   tiered: TieredOpening | None = None) -> OpenedDirectory:
    """Lock the directory (creating it if missing), adopt the store's copies it does not
    know (with `tiered`), load and if need be recover its segments, and create the first
    segment of an empty log (or, after remote-only segments, the active one where they end).

    The clean-shutdown marker stays until the Log's first change to the segments: until
    then the directory is exactly as the clean close left it, so a crash is still a clean
    shutdown, and a clean open writes nothing (apart from repairing a damaged index)."""
    os.makedirs(directory, exist_ok=True)
    lock_fd = take_lock(directory)
    try:
        if tiered is not None:
            tiered.adopt()
        segments, report = load_segments(directory, index_interval_bytes, tiered, lazy=True)
        if not segments or not isinstance(segments[-1], LogSegment):
            segments.append(LogSegment.create(directory, segments[-1].next_offset
                                              if segments else 0))
            fsio.fsync_dir(directory)
        marker_present = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
        floor = read_clock_floor(directory) if marker_present else 0
        if not marker_present and not report.clean:
            # recovered segments are whole and fsync'd from here on
            segments[-1].flush()
            write_recovery_point(directory, segments[-1].base_offset)
    except BaseException:
        os.close(lock_fd)
        raise
    return OpenedDirectory(lock_fd, segments, report, marker_present, floor)


def load_segments(directory: str, index_interval_bytes: int,
                  tiered: TieredOpening | None = None, *, lazy: bool = False
                  ) -> tuple[list, LoadReport]:
    """Segments in offset order: a LogSegment per .log (its `remote` set from `N.remote`
    with `tiered`), a RemoteSegment per remote-only segment (`N.remote` alone). With
    `lazy` (an open), the sealed segments of a directory the last clean close vouched for
    are left out, as summary rows in `report.summarised` (summary_open.py)."""
    report = LoadReport()
    report.clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    names = os.listdir(directory)
    summary = read_summary_file(directory) if report.clean else None
    if lazy and tiered is None and summary is not None and vouched_summary(summary, names):
        found = _open_summarised(directory, index_interval_bytes, report, summary)
        if found is not None:
            return found, report
    recovery_point = read_recovery_point(directory)
    # an interrupted compaction swap is finished or undone before anything is listed (one
    # listing serves both when no swap was in progress: the usual case)
    if [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]:
        report.swaps = swap.recover(directory)
        for note in report.swaps:
            log.info("kdelay recovery: %s", note)
        names = os.listdir(directory)
    listing = report.listing = _tidy_directory(directory, report, names)
    bases, remote_bases = listing.bases, set(listing.remote_only)
    if remote_bases and tiered is None:
        raise _store_needed(directory, listing.remote_only[0])
    summaries = _usable_summaries(summary, bases, remote_bases)
    deferred = report.deferred = None if summaries is None else DeferredIndexes(
        directory, index_interval_bytes, report, _recover)
    segments: list = []
    try:
        for i, base in enumerate(bases):
            if segments and base < segments[-1].next_offset and _empty_log(directory, base):
                # an empty file left by a roll whose later steps failed: it holds nothing
                _delete_files(directory, base)
                report.orphans_removed += 1
                report.problems.append(f"removed empty segment {base} left by a failed roll")
                continue
            if segments and base != segments[-1].next_offset:
                if base < segments[-1].next_offset:
                    raise CorruptLogError(
                        f"segment {base} overlaps the previous one (which ends at "
                        f"{segments[-1].next_offset})", segment_file(directory, base, LOG_SUFFIX))
                report.problems.append(
                    f"offset gap: {segments[-1].next_offset}..{base - 1} missing before "
                    f"segment {base}")
            if tiered is not None and base in remote_bases:
                segments.append(tiered.remote_segment(base))
                continue
            unflushed = not report.clean and (i == len(bases) - 1 or base >= recovery_point)
            cut = 0
            marker = _compaction_marker(directory, bases, i, report, listing)
            end = None if marker is None else marker.end_offset
            if unflushed:
                seg, cut, _ = _recover(directory, base, index_interval_bytes, report,
                                       truncate=True, marker=marker)
            else:
                from_summary = None
                if deferred is not None and summaries is not None and base in summaries:
                    from_summary = _deferred_load(directory, summaries[base], end, deferred)
                seg = from_summary if from_summary is not None else _load_or_rebuild(
                    directory, base, index_interval_bytes, report, marker,
                    last=i == len(bases) - 1)
            if tiered is not None:
                seg.remote = tiered.committed_copy(base)
            segments.append(seg)
            if cut and i < len(bases) - 1:
                # The log is cut inside a sealed segment: what follows no longer continues it.
                for later in bases[i + 1:]:
                    _delete_files(directory, later)
                    report.problems.append(f"deleted segment {later} after the truncation point")
                break
    except BaseException:
        for seg in segments:
            seg.close()
        raise
    return segments, report


def _open_summarised(directory: str, interval: int, report: LoadReport,
                     summary: SummaryFile) -> list | None:
    """The active segment, the sealed ones left in `report.summarised` (summary_open.py);
    None if the summary does not hold together (nothing was opened)."""
    deferred = DeferredIndexes(directory, interval, report, _recover)

    def make(row: SegmentSummary) -> LogSegment:
        seg = LogSegment.deferred_load(directory, row, deferred)
        deferred.defer(seg)
        return seg

    found = open_summarised(directory, summary, lambda base: _load_or_rebuild(
        directory, base, interval, report, None, last=True), make)
    if found is None:
        return None
    active, report.summarised, report.listing = found
    report.deferred = deferred
    return [active]


def _load_or_rebuild(directory: str, base: int, interval: int, report: LoadReport,
                     marker: swap.Marker | None, *, last: bool) -> LogSegment:
    """A segment not in need of recovery, opened from its persisted indexes; if they do not
    hold, rebuilt from its .log (and the rebuilt indexes persisted, but for a damaged
    sealed segment)."""
    try:
        return _load(directory, base, None if marker is None else marker.end_offset)
    except IndexFileError as e:
        report.problems.append(f"rebuilding indexes: {e}")
    # The last segment takes the appends: a damaged tail left there would sit in front of
    # every new batch (unreadable by offset, and cut off by the next crash recovery
    # together with the acknowledged batches).
    seg, _, damaged = _recover(directory, base, interval, report, truncate=last,
                               marker=marker)
    # Persist the rebuilt indexes (atomically), so the damage is repaired once: a repair is
    # the one write a clean open may make. Not for a damaged sealed segment: an index of it
    # would make the next open trust it and hide the damage (keep it in memory, rebuild
    # next time); the last segment's damage was cut off, so it is whole again.
    if last or not damaged:
        seg.persist_indexes()
    return seg


def _compaction_marker(directory: str, bases: list[int], i: int, report: LoadReport,
                       listing: Listing) -> swap.Marker | None:
    """The marker of segment `bases[i]` if compaction wrote it (None if not). A damaged
    marker is rewritten from the next segment's base (a compacted segment is never the
    last one); without a next segment the segment is treated as never compacted, so that
    any gap in it is reported as damage."""
    base = bases[i]
    if not listing.has(base, MARKER_SUFFIX):
        return None
    marker = swap.read_marker(directory, base)
    if marker is not None:
        return marker
    if i + 1 == len(bases):
        report.problems.append(f"segment {base}: damaged compaction marker, no next segment "
                               f"to take its end offset from")
        return None
    end = bases[i + 1]
    report.problems.append(f"segment {base}: damaged compaction marker rewritten (ends at "
                           f"{end}, the next segment's base)")
    marker = swap.Marker(base, end)  # the checksum of its base offsets is lost with it
    fsio.atomic_write(segment_file(directory, base, MARKER_SUFFIX), swap.encode_marker(marker))
    return marker


def _usable_summaries(summary: SummaryFile | None, bases: list[int], remote_bases: set[int]
                      ) -> dict[int, SegmentSummary] | None:
    """The segment summary's rows, if they describe exactly the sealed local segments
    listed (every one but the last); else None (every index is loaded at open)."""
    if summary is None:
        return None
    summaries = summary.rows()
    local = [b for b in bases[:-1] if b not in remote_bases]
    if len(summaries) != len(local) or any(b not in summaries for b in local):
        return None
    return summaries


def _deferred_load(directory: str, summary: SegmentSummary, compacted_end: int | None,
                   deferred: DeferredIndexes) -> LogSegment | None:
    """The segment opened from its summary, its indexes deferred; None where the summary
    and the compaction marker disagree (the caller loads it as usual)."""
    if summary.compacted != (compacted_end is not None) or (
            compacted_end is not None and compacted_end != summary.next_offset):
        return None
    seg = LogSegment.deferred_load(directory, summary, deferred)
    deferred.defer(seg)
    return seg


def _load(directory: str, base: int, compacted_end: int | None) -> LogSegment:
    """LogSegment.load, plus the compaction marker's word on where the segment ends."""
    seg = LogSegment.load(directory, base)
    if compacted_end is not None:
        seg.compacted = True
        if seg.next_offset != compacted_end:
            seg.close()
            raise IndexFileError(f"segment {base}: indexes end at {seg.next_offset}, its "
                                 f"compaction marker at {compacted_end}")
    return seg


def _recover(directory: str, base: int, interval: int, report: LoadReport, *,
             truncate: bool, marker: swap.Marker | None = None
             ) -> tuple[LogSegment, int, bool]:
    """Rebuild a segment's indexes from its .log; returns it, how many bytes were cut, and
    whether the scan stopped at damage."""
    path = segment_file(directory, base, LOG_SUFFIX)
    before = os.path.getsize(path)
    seg, error = LogSegment.recover(directory, base, index_interval_bytes=interval,
                                    check_crc=True, truncate=truncate,
                                    compacted_end=None if marker is None else marker.end_offset,
                                    bases_crc=None if marker is None else marker.bases_crc)
    report.segments_scanned += 1
    report.bytes_scanned += before
    report.indexes_rebuilt += 3
    cut = before - seg.size
    if error is not None:
        if truncate:
            report.bytes_truncated += cut
            report.problems.append(f"truncated {before - seg.size} bytes of torn or corrupt "
                                   f"tail: {error}")
        else:
            report.problems.append(f"damaged flushed segment (not truncated): {error}")
        log.warning("kdelay recovery: %s", report.problems[-1])
    return seg, cut, error is not None


def _tidy_directory(directory: str, report: LoadReport, names: list[str]) -> Listing:
    """Remove leftovers (temp files, indexes without a .log, see layout.classify) of the
    directory listed as `names`; return its listing."""
    listing = classify(names)
    for name in listing.leftovers:
        fsio.unlink(os.path.join(directory, name))
        report.orphans_removed += 1
    return listing


def _store_needed(directory: str, first_remote: int) -> RemoteStorageError:
    """The refusal to open, without its object store, a directory whose segments from
    `first_remote` on are held only there: it names the store the directory records."""
    # lazily: the tiered layer builds on this module, and only this refusal needs it
    from ..tiered.tier import SETTINGS_FILE, read_settings

    try:
        settings = read_settings(directory)
    except CorruptLogError:
        settings = None
    store = (f"the object store {settings[0]}" if settings is not None
             else f"an object store ({SETTINGS_FILE} does not say which)")
    return RemoteStorageError(
        f"{directory}: segment {first_remote} and others are held only in {store}: open the "
        f"log with LogConfig(remote_storage=..., remote_storage_options=...) naming that store")


def _empty_log(directory: str, base: int) -> bool:
    try:
        return os.path.getsize(segment_file(directory, base, LOG_SUFFIX)) == 0
    except FileNotFoundError:
        return False


def _delete_files(directory: str, base: int) -> None:
    fsio.unlink(segment_file(directory, base, LOG_SUFFIX))
    for suffix in COMPANION_SUFFIXES:
        fsio.unlink(segment_file(directory, base, suffix))
