"""One open log directory's lifetime: what opening loads (segments by loader.py, then the
cancellation journals), the clean-shutdown marker that the first change removes, the
append horizon published for lock-free readers (append_horizon.py, horizon_writer.pyx),
the clean close, and the release of every descriptor, which a finalizer also performs when
a Log is dropped without close() (as a crashed process would: a later open in this process then
recovers the directory instead of failing with LogLockedError forever)."""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, NamedTuple

from ... import fsio
from ...config import LogConfig
from ...errors import os_errors
from ..cancellation import cancel_ops
from ..cancellation.cancel_store import CancelStore
from ..segments.layout import (
    CANCEL_INDEX_SUFFIX,
    CANCELS_SUFFIX,
    MARKER_SUFFIX,
    classify,
    compaction_in_progress,
)
from ..segments.segment import LogSegment
from ..segments.segment_set import SegmentSet
from ..segments.segment_summary import (
    COMPANIONS,
    SUMMARY_FILE,
    SegmentSummary,
    encode_listing,
    write_summaries,
)
from .horizon_writer import Horizon

if TYPE_CHECKING:
    from ..tiered.tier import RemoteTier

from .loader import (
    CLEAN_SHUTDOWN_FILE,
    LoadReport,
    TieredOpening,
    open_directory,
    write_recovery_point,
)


class Opened(NamedTuple):
    lock_fd: int
    segments: SegmentSet
    cancels: CancelStore
    report: LoadReport
    marker_present: bool
    clock_floor: int  # the log clock at the last clean close (0: unknown)


def open_with_tier(path: str, config: LogConfig) -> tuple[Opened, RemoteTier | None]:
    """`open_log_directory` as a Log opens it: with `remote_storage`, through its tier (the
    tiered modules imported here, so a process without tiered storage never loads them).
    OSErrors come out as kdelay's errors (errors.os_errors)."""
    tier = tiered = None
    if config.remote_storage is not None:
        from ..tiered.opening import TieredDirectory
        from ..tiered.tier import RemoteTier

        tier = RemoteTier(path, config)
        tiered = TieredDirectory(path, tier)
    return os_errors("open", path, lambda: open_log_directory(
        path, config.index_interval_bytes, tiered)), tier


def open_log_directory(path: str, index_interval_bytes: int,
                       tiered: TieredOpening | None = None) -> Opened:
    """Lock and recover the directory (loader.open_directory; with `tiered`, adopting the
    store's copies it does not know and serving remote-only segments), then load its
    cancellation journals; on failure every descriptor is closed again (and the lock
    released)."""
    opened = open_directory(path, index_interval_bytes, tiered)
    segments = SegmentSet(path, opened.segments, opened.report.summarised)
    if opened.report.deferred is not None and opened.report.summarised is not None:
        opened.report.deferred.make_all = segments.make_all
    cancels = CancelStore(path)
    try:
        # after a crash every journal is checked against the recovered segments' ends,
        # and reschedules in flight are settled against the log (cancel_store.py); only
        # the segments with a journal or its cache are made (after a clean open, few)
        listing = opened.report.listing
        with_files = None if listing is None else \
            listing.companions.get(CANCELS_SUFFIX, frozenset()) | \
            listing.companions.get(CANCEL_INDEX_SUFFIX, frozenset())
        having = opened.segments if with_files is None else \
            [segments[b] for b in sorted(with_files) if b in segments]
        cancels.load([(s.base_offset, s.next_offset) for s in having],
                     recovered=() if opened.report.clean else segments.bases(),
                     copy_check=cancel_ops.copy_checker(segments))
    except BaseException:
        release(segments, opened.lock_fd, cancels)
        raise
    opened.report.problems.extend(cancels.problems)
    if tiered is not None:
        opened.report.problems.extend(tiered.problems)
    return Opened(opened.lock_fd, segments, cancels, opened.report, opened.marker_present,
                  opened.clock_floor)


class Lifetime:
    """The open/close protocol of one open directory, owned by its Log (the lock held by
    the caller for mark_dirty and close_clean)."""

    def __init__(self, owner: object, path: str, opened: Opened):
        self.path = path
        self.lock_fd = opened.lock_fd
        self.marker_present = opened.marker_present  # see mark_dirty
        self._segments = opened.segments
        self._cancels = opened.cancels
        self.horizon: Horizon | None = None  # see start_horizon
        # holds no reference to the owner; release() detaches it
        self.finalizer = weakref.finalize(owner, release, opened.segments, opened.lock_fd,
                                          opened.cancels)

    def mark_dirty(self) -> None:
        """Before the first change to segments after a clean open: remove the clean-shutdown
        marker (durably), so that a crash from here on is recovered as one."""
        if self.marker_present:
            fsio.unlink(os.path.join(self.path, CLEAN_SHUTDOWN_FILE))
            fsio.fsync_dir(self.path)
            self.marker_present = False

    def start_horizon(self, clock_floor: int) -> None:
        """Publish the append horizon (what lock-free readers may assume), once the log
        clock's floor is known."""
        self.horizon = Horizon(self.path, clock_floor)

    def close_clean(self, clock_floor: int) -> None:
        """Persist the active segment's indexes and the recovery point (unless nothing
        changed since a clean open), checkpoint the cancellations, write the segment
        summary (with the directory's listing, which the checkpoint may change), then the
        marker holding the log clock (so it does not run backwards across a restart)."""
        if not self.marker_present:
            self._segments.active.persist_indexes()
            write_recovery_point(self.path, self._segments.active.next_offset)
        self._cancels.checkpoint(everything=True)  # after the .log fsync above
        if not self.marker_present:
            write_summary(self.path, self._segments)
        fsio.atomic_write(os.path.join(self.path, CLEAN_SHUTDOWN_FILE),
                          str(clock_floor).encode("ascii"))

    def release(self) -> None:
        """Close every descriptor now (once: the finalizer is detached)."""
        self.finalizer.detach()
        if self.horizon is not None:
            self.horizon.close()
        release(self._segments, self.lock_fd, self._cancels)
        self.lock_fd = -1  # its number may be reused by the next descriptor opened

    def orphaned(self) -> None:
        """In a forked child (kdelay.forks): close the inherited descriptors and write
        nothing. os.close, not flock(LOCK_UN): the lock belongs to the open file the child
        shares with the parent and lasts until every descriptor of it is closed, so the
        parent keeps it, and once the parent closes the log the child may open its own.
        The append horizon's shared map is left alone (closing it tells readers that the
        parent's writer is gone)."""
        self.finalizer()  # release(), once
        self.lock_fd = -1


def sealed_summaries(segments: SegmentSet) -> list[SegmentSummary]:
    """What the next clean open needs of each sealed local segment instead of its indexes
    (segment_summary.py): from memory (a segment not made since the open: its row),
    O(sealed segments)."""
    out = []
    for base, seg in segments.made():
        if seg is None:
            out.append(segments.summary_of(base))
        elif seg is not segments.active and isinstance(seg, LogSegment):
            out.append(SegmentSummary(seg.base_offset, seg.next_offset, seg.size,
                                      seg.min_deliver_after, seg.max_key, seg.max_timestamp,
                                      seg.compacted))
    return out


def write_summary(path: str, segments: SegmentSet) -> None:
    """Write the segment summary of a clean close, vouching for the directory's listing
    (so that the next open need not list its segments one by one, summary_open.py) when
    the listing is exactly what the summary describes: no leftovers, no compaction or
    remote copy in flight, a .log per row plus the active one's, compaction markers on
    exactly the compacted rows. O(files in the directory)."""
    rows = sealed_summaries(segments)
    names = os.listdir(path)
    listing = classify(names)
    vouched = (not listing.leftovers and not listing.remote_only and not listing.copied
               and not listing.deleting and not compaction_in_progress(names)
               and listing.local == [*(r.base_offset for r in rows), segments.active.base_offset]
               and listing.companions.get(MARKER_SUFFIX, frozenset()) ==
               {r.base_offset for r in rows if r.compacted})
    # the listing as the next open will find it: with this summary and the marker
    names = list({*names, SUMMARY_FILE, CLEAN_SHUTDOWN_FILE})
    write_summaries(path, rows, segments.active.base_offset,
                    {suffix: listing.companions.get(suffix, frozenset())
                     for suffix in COMPANIONS},
                    encode_listing(names) if vouched else b"")


def release(segments: SegmentSet, lock_fd: int, cancels: CancelStore) -> None:
    """Close the cancellation journals', every segment's and the lock's descriptors (which
    releases the lock)."""
    cancels.close()
    for _, seg in segments.made():
        if seg is not None:  # (one not made opened nothing)
            seg.close()
    os.close(lock_fd)
