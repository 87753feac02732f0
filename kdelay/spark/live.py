"""A driver-side catalog of the batches of a partition directory that another process may
be appending to, read without the log's lock (no Spark here; the streaming source uses it).

`LivePartition.refresh(now)` returns the bound E of kdelay.log.segments.append_horizon (every record due at
or before E is already visible in the files) and then brings the catalog up to date:

* a segment first seen sealed (a newer segment exists) is listed from its persisted
  .dlyindex when that index is valid for the .log's size (no .log read at all), else by
  walking its batch headers;
* the last segment (the one being appended to) is walked incrementally from where the
  previous refresh stopped, reading only whole batches whose CRC and base offset check out.
  A batch that is still being written (shorter than its header says, or not yet CRC-valid)
  ends the walk; the next refresh retries it. One that stays bad while its writer is alive
  and idle is corruption and raises CorruptLogError; so is one that stays bad in a sealed
  segment, writer or not (a sealed .log is never written again).

The horizon is read before the files, so a batch that lands after the files were read is
due after E and belongs to a later refresh. Batches whose key is at or below `floor` (what
the stream has already consumed) are not kept.

Beside a compaction. Compaction swaps a rewritten segment in (log/compaction/swap.py): the
merged-away segments' .log files are deleted before the new .log is renamed over the
first one, so a listing taken in between shows records nowhere. A refresh therefore only
vouches for its catalogue when the directory held still around it: no swap being
installed, and every .log it listed still the same file at its end (a segment rolled
meanwhile only adds appends due after E). "The same file" is not the same inode: a
filesystem reuses a freed inode number at once, so a segment compaction rewrote twice can
come back under the number catalogued; a sealed segment is known by its inode and ctime
(segment_bytes.file_ident). Otherwise it returns NO_BOUND (plan
nothing new; the stream keeps its previous bound) and keeps the segments a swap in
progress is replacing as they were; the next settled refresh catalogues a replaced
segment afresh (its inode changed) and drops a deleted one. Cost per refresh: one small
read for the horizon, two directory listings and two stats per segment, and reading the
bytes appended since the last refresh.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sortedcontainers import SortedList

from ..errors import CorruptLogError, KdelayError
from ..index.entry import (
    E_BASE_OFFSET,
    E_DELIVER_AFTER,
    E_LAST_OFFSET_DELTA,
    E_POSITION,
    E_SIZE,
)
from ..log.batch import codec, walker
from ..log.batch.offset_continuity import continues
from ..log.compaction import swap
from ..log.compaction.swap_watch import swapping, wait_out_swaps
from ..log.segments import append_horizon
from ..log.segments.layout import (
    LOG_SUFFIX,
    REMOTE_SUFFIX,
    PartitionDir,
    classify,
    segment_file,
)
from .segment_bytes import FileIdent, SegmentBytes, file_ident, open_segment

NO_BOUND = -1  # a refresh that cannot vouch for its catalogue (see the module docstring)
T = TypeVar("T")


class BatchRef(tuple):
    """(deliver_after, base_offset, last_offset, segment, position, size): sorts by key."""

    __slots__ = ()

    def __new__(cls, deliver_after: int, base_offset: int, last_offset: int, segment: int,
                position: int, size: int) -> BatchRef:
        return tuple.__new__(cls, (deliver_after, base_offset, last_offset, segment,
                                   position, size))


@dataclass
class _Segment:
    ident: FileIdent  # segment_ident when catalogued (another one: it was replaced, or sealed)
    walked: int = 0  # bytes of the .log already catalogued
    next_offset: int = -1  # the base offset the next batch must have (-1: unknown yet)
    complete: bool = False  # sealed and fully catalogued
    bad_at: int = -1  # position of a bad batch seen by the previous walk
    path: str = ""  # where its bytes were read, for messages (a remote object's name)


def _listed_bases(directory: str) -> list[int] | None:
    """The directory's segment base offsets (local and remote-only), from one listing;
    None while a compaction's swap is being installed (swap_watch: the listing may show
    neither the old segments nor the new one)."""
    names = os.listdir(directory)
    return None if swapping(names) else classify(names).bases


def segment_ident(directory: str, base: int, sealed: bool = True) -> FileIdent | None:
    """What identifies a segment's bytes: its .log's file_ident (a compaction's swap
    replaces the file; `sealed`: a newer segment exists), or for a remote-only segment
    ("remote", its marker's inode); None if it is gone."""
    try:
        return file_ident(os.stat(segment_file(directory, base, LOG_SUFFIX)), sealed)
    except FileNotFoundError:
        pass
    try:
        return ("remote", os.stat(segment_file(directory, base, REMOTE_SUFFIX)).st_ino)
    except FileNotFoundError:
        return None


def log_inodes(directory: str) -> dict[int, FileIdent] | None:
    """{base offset: segment_ident} of the directory's segments (None: mid-swap, see
    _listed_bases)."""
    bases = _listed_bases(directory)
    if bases is None:
        return None
    out = {}
    for i, base in enumerate(bases):
        ident = segment_ident(directory, base, i + 1 < len(bases))
        if ident is not None:  # else deleted since the listing: as if listed a moment later
            out[base] = ident
    return out


def _held_still(before: dict | None, after: dict | None) -> bool:
    """Did the directory hold still between two `log_inodes`? Segments rolled meanwhile
    (after every one listed before) do not count: they only hold later appends; nor does
    the segment listed last being sealed by that roll (its identity then changes kind, see
    file_ident: the same inode is the same file, which compaction cannot have rewritten
    while it was being appended to)."""
    if before is None or after is None:
        return False
    last = max(before, default=-1)
    now = {b: i for b, i in after.items() if b <= last}
    if isinstance(before.get(last), int) and isinstance(now.get(last), tuple) \
            and now[last][0] == before[last]:
        now[last] = before[last]
    return now == before


def wall_ms() -> int:
    """The reader's wall clock, in ms: what the append horizon's bound is computed from."""
    return time.time_ns() // 1_000_000


class LivePartition:
    def __init__(self, part: PartitionDir, floor: tuple[int, int] = (-1, -1)):
        self.part = part
        self.floor = floor  # (deliver_after, offset): consumed; keep only keys above it
        self.batches: SortedList = SortedList()
        self._segments: dict[int, _Segment] = {}

    # ------------------------------------------------------------------ queries

    def latest(self, bound: int, start: tuple[int, int]) -> tuple[int, int]:
        """The largest record key due at or before `bound` (a batch's last record), or
        `start` if there is none above it."""
        i = self.batches.bisect_left((bound + 1,))
        if i == 0:
            return start
        b = self.batches[i - 1]
        key = (b[0], b[2])
        return key if key > start else start

    def between(self, start: tuple[int, int], end: tuple[int, int]) -> list[BatchRef]:
        """Batches holding a record whose key is in (start, end], in key order."""
        out = []
        for b in self.batches.irange((start[0],)):
            if (b[0], b[1]) > end:
                break
            if (b[0], b[2]) > start:
                out.append(b)
        return out

    def forget(self, upto: tuple[int, int]) -> None:
        """Drop batches whose every record is at or below `upto` (committed)."""
        self.floor = max(self.floor, upto)
        while self.batches and (self.batches[0][0], self.batches[0][2]) <= self.floor:
            self.batches.pop(0)

    # ------------------------------------------------------------------ refresh

    def refresh(self, now: int) -> int:
        """Bring the catalogue up to date; returns the bound E (every record due at or
        before E is catalogued), or NO_BOUND when the directory moved under the refresh."""
        bound = append_horizon.read_bound(self.part.path, now)
        state = append_horizon.read_state(self.part.path)
        idle_writer = state is not None and not state[0]
        inodes = log_inodes(self.part.path)
        if inodes is not None:  # mid-swap, what is missing may only be moving: keep it
            for gone in set(self._segments) - set(inodes):  # deleted (retention, a merge)
                self._drop(gone)
        bases = list(inodes) if inodes is not None else sorted(self._segments)
        for i, base in enumerate(bases):
            sealed = i + 1 < len(bases)
            seg = self._segments.get(base)
            if seg is not None and inodes is not None and seg.ident != inodes[base]:
                self._drop(base)  # rewritten in place (compaction): catalogue it afresh
                seg = None
            if seg is None:  # so base was listed: mid-swap only known segments are walked
                assert inodes is not None  # (else every base walked is a known segment)
                seg = self._segments[base] = _Segment(inodes[base])
                if sealed and self._from_index(base):
                    seg.complete = True
                    continue
            if seg.complete:
                continue
            try:  # a sealed .log never changes: what looks damaged there is damage
                whole = self._walk(base, seg, idle_writer or sealed)
            except FileNotFoundError:
                self._drop(base)
                continue
            seg.complete = sealed and whole
        return bound if _held_still(inodes, log_inodes(self.part.path)) else NO_BOUND

    def inodes(self) -> dict[int, FileIdent]:
        """{base offset: segment_ident} of the segments catalogued."""
        return {base: seg.ident for base, seg in self._segments.items()}

    def damaged(self) -> tuple[str, int] | None:
        """(path, position) where a sealed segment's walk stopped short of its end, if one
        did: a sealed .log never changes, so after a settled refresh that is damage."""
        bases = sorted(self._segments)
        for base in bases[:-1]:
            seg = self._segments[base]
            if not seg.complete:
                return (seg.path or segment_file(self.part.path, base, LOG_SUFFIX),
                        seg.bad_at if seg.bad_at >= 0 else seg.walked)
        return None

    def _drop(self, base: int) -> None:
        """Forget a segment and its batches (deleted, or replaced by a rewrite). O(n)."""
        self._segments.pop(base, None)
        if any(b[3] == base for b in self.batches):
            self.batches = SortedList(b for b in self.batches if b[3] != base)

    def _keep(self, da: int, last: int) -> bool:
        return (da, last) > self.floor

    def _from_index(self, base: int) -> bool:
        src = open_segment(self.part.path, base)
        if src is None:
            return False
        with src:
            idx = src.dly_index()
        if idx is None:
            return False
        cols = [c.tolist() for c in idx.disk_columns]
        for d, b, p, lo, s in zip(cols[E_DELIVER_AFTER], cols[E_BASE_OFFSET], cols[E_POSITION],
                                  cols[E_LAST_OFFSET_DELTA], cols[E_SIZE], strict=True):
            if self._keep(d, b + lo):
                self.batches.add(BatchRef(d, b, b + lo, base, p, s))
        return True

    def _walk(self, base: int, seg: _Segment, confirms: bool) -> bool:
        """Catalogue the whole, CRC-valid batches appended to segment `base` since the last
        walk (the shared walker's framing parse); stop at the first batch that is not (yet)
        whole and valid. True when the walk reached the end of the file. Offsets run on as
        the engine's rule says (offset_continuity): with gaps only in a segment compaction
        rewrote, never a step back."""
        if seg.next_offset < 0:
            seg.next_offset = base
        # the swap puts a compacted segment's marker in place before its .log
        compacted = swap.marker_exists(self.part.path, base)
        src = open_segment(self.part.path, base)
        if src is None:
            raise FileNotFoundError(segment_file(self.part.path, base, LOG_SUFFIX))
        with src:
            if not src.is_file(seg.ident):
                return False  # replaced since it was listed: the next refresh starts afresh
            if src.remote is not None:
                compacted = src.remote.compacted
            return self._walk_bytes(src, seg, compacted, confirms)

    def _walk_bytes(self, src: SegmentBytes, seg: _Segment, compacted: bool,
                    confirms: bool) -> bool:
        path = seg.path = src.path
        frames = walker.frames(src.read, seg.walked, src.size, path=path)
        try:
            for pos, h, buf, rel in frames:
                if not continues(h.base_offset, seg.next_offset, compacted) or \
                        not codec.crc_ok(buf, rel, h):
                    return self._bad(seg, pos, confirms, path)
                if self._keep(h.deliver_after, h.last_offset):
                    self.batches.add(BatchRef(h.deliver_after, h.base_offset,
                                              h.last_offset, src.base, pos, h.size))
                seg.next_offset = h.last_offset + 1
                seg.walked = pos + h.size
                seg.bad_at = -1
        except CorruptLogError as e:  # not whole yet (or damaged): see _bad
            return self._bad(seg, e.position if e.position is not None else seg.walked,
                             confirms, path)
        return True

    @staticmethod
    def _bad(seg: _Segment, at: int, confirms: bool, path: str) -> bool:
        # In the segment being appended to, in flight (the writer is mid-append) or torn (a
        # writer died mid-append: the next open truncates it) looks the same as damage at
        # first; damage stays put while a live writer sits idle. A sealed segment is never
        # written again (`confirms`): a second sighting in the same file is damage, with or
        # without a writer (else the stream would stall on it silently).
        if seg.bad_at == at and confirms:
            raise CorruptLogError("batch is damaged (CRC, framing or offset); the stream "
                                  "cannot go past it", path, at)
        seg.bad_at = at
        return False


def _until_still(directory: str, timeout_s: float, attempt: Callable[[], T | None]) -> T:
    """swap_watch.wait_out_swaps, or KdelayError when the directory did not hold still."""
    got = wait_out_swaps(directory, attempt, timeout_s)
    if got is None:
        raise KdelayError(f"{directory}: the log's files did not hold still: a compaction's "
                          f"swap unfinished after {timeout_s:g} s, or left half done by a "
                          f"process that died (the next Log.open completes it)")
    return got


def settled(part: PartitionDir, floor: tuple[int, int], timeout_s: float
            ) -> tuple[LivePartition, int]:
    """A catalogue of the partition's files as they are now, from a refresh the directory
    held still around, and its bound (see _until_still for the waiting)."""
    def attempt() -> tuple[LivePartition, int] | None:
        live = LivePartition(part, floor)
        bound = live.refresh(wall_ms())
        return None if bound == NO_BOUND else (live, bound)

    return _until_still(part.path, timeout_s, attempt)


def bases_between_swaps(directory: str, timeout_s: float) -> list[int]:
    """The directory's segment base offsets from a listing taken while no compaction's swap
    was being installed (see _until_still for the waiting)."""
    return _until_still(directory, timeout_s, lambda: _listed_bases(directory))
