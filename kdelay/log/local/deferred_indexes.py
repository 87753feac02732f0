"""DeferredIndexes: the indexes of the sealed segments a clean open took from the segment
summary (segment_summary.py), each loaded on first use with every check an open makes
(LogSegment.load's), plus agreement with the summary; one that fails is rebuilt from its
.log as an open rebuilds it (by the loader's recovery, passed in), and counted in the
open's LoadReport (loader.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import CorruptLogError, IndexFileError
from ...index.deliver_after_index import DeliverAfterIndex
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex
from ..compaction import swap
from ..segments.layout import DLYINDEX_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX
from ..segments.segment import LogSegment

if TYPE_CHECKING:
    from .loader import LoadReport

# the loader's rebuild of one segment from its .log: (directory, base, interval, report,
# truncate=, marker=) -> (segment, bytes cut, whether the scan stopped at damage)
Recover = Callable[..., tuple[LogSegment, int, bool]]

# what each deferred index is, by suffix: (its kind, the LogSegment attribute holding it)
_KINDS = {INDEX_SUFFIX: (OffsetIndex, "offset_index"),
          TIMEINDEX_SUFFIX: (TimeIndex, "time_index"),
          DLYINDEX_SUFFIX: (DeliverAfterIndex, "dly_index")}


class DeferredIndexes:
    """The indexes of the sealed segments a clean open took from the segment summary,
    loaded on first use with the checks `LogSegment.load` makes (header, staleness
    against the .log's size, chunk table, first and last chunk), plus agreement with the
    summary (end offset, smallest deliverAfter, largest key). An index that fails is
    rebuilt from its .log and persisted, as an open rebuilds it, and counted in the
    report; if the .log no longer bears out the summary, the read raises CorruptLogError
    (the segment was changed behind the clean close)."""

    def __init__(self, directory: str, index_interval_bytes: int, report: LoadReport,
                 recover: Recover):
        self.directory = directory
        self._recover = recover
        self.interval = index_interval_bytes
        self.report = report
        self.segments: list[LogSegment] = []
        # makes every segment left as a summary row (SegmentSet.make_all), so that
        # `finish` reaches them too (set by the open; None: all made at open)
        self.make_all: Callable[[], None] | None = None
        self._loaded_of: dict[int, set[str]] = {}  # base -> suffixes loaded (once one is)
        self.loads = 0  # index files loaded since the open
        self._failed: set[int] = set()  # bases whose .log no longer matches the summary

    def defer(self, seg: LogSegment) -> None:
        self.segments.append(seg)

    def pending(self, seg: LogSegment, suffix: str) -> bool:
        return seg._deferred is self and suffix not in self._loaded_of.get(seg.base_offset, ())

    def load(self, seg: LogSegment, suffix: str):
        """Index `suffix` of `seg`, loaded now (under the Log's lock, as every read)."""
        kind, attr = _KINDS[suffix]
        seg.fd  # noqa: B018 - opens the .log first: an index is checked against its real size
        if not self.pending(seg, suffix):
            return getattr(seg, attr)  # a .log changed behind the close: rebuilt them all
        try:
            index = kind.load(seg.path(suffix), base_offset=seg.base_offset,
                              log_bytes=seg.size, lazy=True)
            self.loads += 1
            _check_against_summary(seg, suffix, index)
            setattr(seg, attr, index)
            self._loaded(seg, (suffix,))
        except IndexFileError as e:
            self._rebuild(seg, e)
        return getattr(seg, attr)

    def finish(self) -> None:
        """Load every deferred index of every segment still open."""
        if self.make_all is not None:
            self.make_all()
        for seg in self.segments:
            if seg.closed or seg.base_offset in self._failed:
                continue  # deleted (retention) or replaced (compaction) since; or reported
            for suffix in sorted(_KINDS):
                if not self.pending(seg, suffix):
                    continue  # loaded already (a rebuild loads all three)
                try:
                    self.load(seg, suffix)
                except CorruptLogError as e:
                    self.report.problems.append(str(e))
                    break

    def _loaded(self, seg: LogSegment, suffixes: tuple[str, ...]) -> None:
        done = self._loaded_of.setdefault(seg.base_offset, set())
        done.update(suffixes)
        if len(done) == len(_KINDS):
            del self._loaded_of[seg.base_offset]
            seg._deferred = None

    def log_changed(self, seg: LogSegment, size: int) -> None:
        """The .log of `seg` is not the size the clean close recorded: its indexes cannot
        be current, so they are rebuilt from it, as an open finds them stale and rebuilds
        them."""
        self._rebuild(seg, IndexFileError(f"{seg.log_path}: {size} bytes, the clean close "
                                          f"left {seg.size}"))

    def _rebuild(self, seg: LogSegment, error: IndexFileError) -> None:
        """Rebuild the segment's indexes from its .log, as an open does: persisted if the
        scan found no damage; if it did, kept in memory (reads stop at the damage, and the
        next open finds it again) with the segment's end moved to it."""
        self.report.problems.append(f"rebuilding indexes: {error}")
        base = seg.base_offset
        marker = swap.read_marker(self.directory, base) if seg.compacted else None
        fresh, _, damaged = self._recover(self.directory, base, self.interval, self.report,
                                     truncate=False, marker=marker)
        try:
            summary = seg.summary
            assert summary is not None  # only a summarised segment defers its indexes
            # a .log cut short (by damage, or behind the clean close) holds less than was
            # recorded: what is left must lie inside it, as the merge plans by those bounds
            inside = fresh.next_offset <= summary.next_offset and (fresh.max_key is None or (
                summary.max_key is not None and
                fresh.min_deliver_after is not None and summary.min_deliver_after is not None
                and fresh.min_deliver_after >= summary.min_deliver_after
                and fresh.max_key <= summary.max_key))
            if not inside:
                self._failed.add(base)
                raise CorruptLogError(f"segment {base}: {error}, and its .log holds what the "
                                      f"clean close did not record of it", seg.log_path)
            seg.offset_index, seg.time_index = fresh.offset_index, fresh.time_index
            seg.dly_index = fresh.dly_index
            seg.size = fresh.size
            self._loaded(seg, tuple(_KINDS))
            # the recorded smallest deliverAfter and largest key stay as bounds of what is
            # left (the segment set is ordered by them)
            seg.next_offset = fresh.next_offset
            seg.summary = summary._replace(next_offset=fresh.next_offset, log_bytes=fresh.size)
            if not damaged:
                seg.persist_indexes()  # repaired once, as an open repairs it
        finally:
            fresh.close()


def _check_against_summary(seg: LogSegment, suffix: str, index) -> None:
    """The checks LogSegment.load makes across a segment's indexes, made against the
    summary each deferred index is loaded by. Raises IndexFileError."""
    summary = seg.summary
    assert summary is not None  # only a summarised segment defers its indexes
    name = seg.path(suffix)
    if index.meta.next_offset != summary.next_offset:
        raise IndexFileError(f"{name}: ends at offset {index.meta.next_offset}, the segment "
                             f"summary says {summary.next_offset}")
    if suffix == DLYINDEX_SUFFIX and (
            (len(index) == 0) != (seg.size == 0) or
            index.min_deliver_after() != summary.min_deliver_after or
            index.max_key() != summary.max_key):
        raise IndexFileError(f"{name}: does not match the segment summary")
