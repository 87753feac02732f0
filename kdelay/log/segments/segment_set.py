"""SegmentSet: a partition's open segments, kept three ways. Sealed segments are
LogSegments or, with tiered storage, RemoteSegments (kdelay/log/tiered/remote_segment.py),
which offer the same reads; the active one is always a LogSegment.

- by base offset (a SortedDict), to find the segment holding an offset: O(log segments);
- sealed segments by the largest (deliverAfter, offset) they hold (a SortedList of
  (deliverAfter, offset, base)), so a fetch or a "what comes due next" question skips every
  segment with nothing after its cursor without touching it;
- sealed segments by (earliest deliverAfter, base offset), a bound below every key each
  holds, so that the fetch's merge takes them up in that order (fetch/planner.py);
- the active one, which takes the appends (always the last by base offset);
- sealed segments' largest record timestamps as a running maximum in offset order, worked
  out again after a change to the set, so the first segment holding a timestamp >= T is
  a binary search (a lookup by time).

After a clean open that vouched for the directory (segment_summary.py), the sealed
segments are rows of the summary until first used: the three orders are built from its
columns, and a segment's LogSegment is made when a call first returns it (`Summarised`),
so an open of 1,000 segments makes none of them (an iteration makes each it reaches).

Not thread-safe by itself: the Log's lock guards every call (making a segment takes a
lock of its own, so that two readers never make two of one segment).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import repeat

from sortedcontainers import SortedDict, SortedList

from ... import fsio
from .recovery_point import write_recovery_point
from .segment import LogSegment
from .segment_summary import BASE, MAX_DA, MAX_OFF, MIN_DA, NO_KEY, SegmentSummary, SummaryFile
from .segment_tail import SegmentTail

_MAX = 1 << 63


class Summarised:
    """Sealed segments as rows of a clean close's summary, each made into a LogSegment by
    `make` (the loader's: LogSegment.deferred_load) on first use."""

    def __init__(self, summary: SummaryFile, make: Callable[[SegmentSummary], LogSegment]):
        self.summary = summary
        self.bases: list[int] = summary.table[:, BASE].tolist()
        self.make = make

    def row(self, base: int) -> SegmentSummary:
        """The summary of segment `base`. O(log segments)."""
        return self.summary.row(bisect_left(self.bases, base))


class SegmentSet:
    def __init__(self, directory: str, segments: list[LogSegment],
                 summarised: Summarised | None = None):
        """`segments` in offset order, the active one last; with `summarised`, the sealed
        segments it holds come before them, unmade (see the module's docstring)."""
        self.directory = directory
        if not segments:
            raise ValueError("a SegmentSet needs at least the active segment")
        self._by_base: SortedDict = SortedDict((s.base_offset, s) for s in segments)
        sealed = [(seg.max_key, seg.min_deliver_after, seg.base_offset)
                  for seg in segments[:-1]]
        max_keys = [(k[0], k[1], base) for k, _, base in sealed if k is not None]
        min_keys = [(da, base) for k, da, base in sealed if k is not None]
        self._summarised = summarised
        self._unmade = 0
        if summarised is not None:
            self._making = threading.Lock()
            self._unmade = len(summarised.bases)
            self._by_base.update(zip(summarised.bases, repeat(None)))
            t = summarised.summary.table
            held = t[t[:, MIN_DA] != NO_KEY]  # rows of segments holding a batch
            bases = held[:, BASE].tolist()
            max_keys += zip(held[:, MAX_DA].tolist(), held[:, MAX_OFF].tolist(), bases, strict=True)
            min_keys += zip(held[:, MIN_DA].tolist(), bases, strict=True)
        # built in one sort each (a clean open of many segments adds them all at once)
        self._by_max_key = SortedList(max_keys)
        self._by_min_key = SortedList(min_keys)
        self.active: LogSegment = segments[-1]
        # its end, where the writer appends (writer.pyx): kept beside `active` so that an
        # append reaches it with one attribute read, as it reached the segment
        self.active_tail: SegmentTail = self.active.tail
        self._changes = 0  # counts changes to which segments are sealed (see by_time)
        self._by_time: tuple[int, list[int], list[int]] = (-1, [], [])

    # ------------------------------------------------------------------ made on first use

    def _get(self, base: int) -> LogSegment:
        seg = self._by_base[base]
        return self._make(base) if seg is None else seg

    def _peek(self, i: int) -> LogSegment:
        base, seg = self._by_base.peekitem(i)
        return self._make(base) if seg is None else seg

    def _make(self, base: int) -> LogSegment:
        """Segment `base`, made from its summary row (once, whichever thread asks first)."""
        assert self._summarised is not None
        with self._making:
            seg = self._by_base[base]
            if seg is None:
                seg = self._summarised.make(self._summarised.row(base))
                self._by_base[base] = seg  # an existing key: the order is untouched
                self._unmade -= 1
            return seg

    def make_all(self) -> None:
        """Make every segment not made yet. O(segments) the first time, O(1) after."""
        if self._unmade:
            for base in [b for b, s in self._by_base.items() if s is None]:
                self._make(base)

    def made(self) -> Iterator[tuple[int, LogSegment | None]]:
        """(base offset, segment) in offset order, None for a segment not made yet: what
        closing needs, without making any."""
        return iter(self._by_base.items())

    def summary_of(self, base: int) -> SegmentSummary:
        """The summary row of a segment not made yet."""
        assert self._summarised is not None
        return self._summarised.row(base)

    def _add_sealed(self, seg) -> None:
        key = seg.max_key
        if key is not None:
            self._by_max_key.add((key[0], key[1], seg.base_offset))
            self._by_min_key.add((seg.min_deliver_after, seg.base_offset))

    def _discard_sealed(self, seg) -> None:
        key = seg.max_key
        if key is not None:
            self._by_max_key.discard((key[0], key[1], seg.base_offset))
            self._by_min_key.discard((seg.min_deliver_after, seg.base_offset))

    # ------------------------------------------------------------------ changes

    def roll(self) -> None:
        """Seal the active segment (its .log fsync'd, its indexes persisted), start a new
        one where it ends, and move the recovery point to the new one."""
        self._changes += 1
        old = self.active
        old.persist_indexes()  # fsyncs the .log first
        new = LogSegment.create(self.directory, old.next_offset)
        # The new file exists: adopt it at once, so that memory and directory agree even
        # if what follows fails (appends must never go on into `old` behind a later file).
        self._by_base[new.base_offset] = new
        self.active = new
        self.active_tail, old.tail.retired = new.tail, True  # (the writer reads it again)
        self._add_sealed(old)
        fsio.fsync_dir(self.directory)
        write_recovery_point(self.directory, new.base_offset)

    def remove_oldest(self) -> LogSegment:
        """Forget the oldest sealed segment (the caller deletes its files)."""
        self._changes += 1
        seg = self._peek(0)
        if seg is self.active:
            raise ValueError("the active segment cannot be removed")
        self._discard_sealed(seg)
        del self._by_base[seg.base_offset]
        return seg

    def hold_remotely(self, local: LogSegment, remote) -> None:
        """Serve the copied sealed segment `local` from `remote` (a RemoteSegment of the same
        offsets and keys) once local retention deleted its files (the caller closes
        `local`)."""
        self._changes += 1
        if local is self.active or self._by_base.get(local.base_offset) is not local:
            raise ValueError(f"segment {local.base_offset} is not a sealed segment here")
        self._by_base[local.base_offset] = remote

    def replace(self, old: list[LogSegment], new: LogSegment) -> None:
        """Swap adjacent sealed segments `old` for `new`, which covers their offsets
        (compaction; the caller closes the old ones). O(len(old) * log segments)."""
        self._changes += 1
        for seg in old:
            if seg is self.active or self._by_base.get(seg.base_offset) is not seg:
                raise ValueError(f"segment {seg.base_offset} is not a sealed segment here")
        for seg in old:
            self._discard_sealed(seg)
            del self._by_base[seg.base_offset]
        self._by_base[new.base_offset] = new
        self._add_sealed(new)

    # ------------------------------------------------------------------ by base offset

    def __len__(self) -> int:
        return len(self._by_base)

    def __iter__(self) -> Iterator[LogSegment]:
        """Every segment in offset order, the active one last (each not made yet is made
        as the iteration reaches it)."""
        if not self._unmade:
            return iter(self._by_base.values())
        return (self._make(base) if seg is None else seg for base, seg in self._by_base.items())

    def __getitem__(self, base: int) -> LogSegment:
        return self._get(base)

    def __contains__(self, base: int) -> bool:
        return base in self._by_base

    def bases(self) -> list[int]:
        return list(self._by_base.keys())

    @property
    def oldest(self) -> LogSegment:
        return self._peek(0)

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment whose range starts at or below `offset` (None: before the log)."""
        i = self._by_base.bisect_right(offset) - 1
        return None if i < 0 else self._peek(i)

    def deliver_after_of(self, offset: int) -> int | None:
        """The deliverAfter of the batch holding `offset` (None: not in the log)."""
        seg = self.segment_for(offset)
        found = seg.find_batch(offset) if seg is not None else None
        return None if found is None else found[1].deliver_after

    def next_after(self, seg: LogSegment) -> LogSegment | None:
        i = self._by_base.bisect_right(seg.base_offset)
        return self._peek(i) if i < len(self._by_base) else None

    def between(self, lo: int, hi: int) -> Iterator[LogSegment]:
        """Segments with base offset in [lo, hi), in offset order."""
        for base in self._by_base.irange(lo, hi, inclusive=(True, False)):
            yield self._get(base)

    def first_reaching(self, timestamp: int) -> LogSegment | None:
        """The first segment in offset order holding a record timestamp >= `timestamp`
        (None: none does). O(log segments); O(segments) attribute reads the first time
        after a roll, retention, compaction or a move to the object store."""
        changes, bases, running_max = self._by_time
        if changes != self._changes:
            bases, running_max, top = [], [], -1
            for base, seg in self._by_base.items():
                if seg is not self.active:  # a segment not made yet: its summary row's
                    top = max(top, self.summary_of(base).max_timestamp if seg is None
                              else seg.max_timestamp)
                    bases.append(base)
                    running_max.append(top)
            self._by_time = (self._changes, bases, running_max)
        i = bisect_left(running_max, timestamp)
        if i < len(bases):
            return self._get(bases[i])
        return self.active if self.active.max_timestamp >= timestamp else None

    # ------------------------------------------------------------------ by largest key

    def sealed_after(self, key: tuple[int, int] | None) -> Iterator[LogSegment]:
        """Sealed segments holding a record with (deliverAfter, offset) > `key` (all sealed
        segments that hold anything if `key` is None), by their largest key."""
        found = (self._by_max_key if key is None else
                 self._by_max_key.irange(minimum=(key[0], key[1], _MAX),
                                         inclusive=(False, True)))
        for _, _, base in found:
            yield self._get(base)

    def first_starting_after(self, low: tuple[int, int] | None
                             ) -> tuple[tuple[int, int], LogSegment] | None:
        """The sealed segment with the smallest (earliest deliverAfter, base offset) above
        `low` (any, if None), with that pair; None if there is none. O(log segments)."""
        found = (self._by_min_key if low is None else
                 self._by_min_key.irange(minimum=low, inclusive=(False, True)))
        for da, base in found:
            return (da, base), self._get(base)
        return None

    def sealed_starting_upto(self, key: tuple[int, int]) -> Iterator[LogSegment]:
        """Sealed segments whose (earliest deliverAfter, base offset) is at or below `key`,
        in that order."""
        for _, base in self._by_min_key.irange(maximum=key):
            yield self._get(base)

    def sealed_hold_after(self, key: tuple[int, int] | None) -> bool:
        """Whether a sealed segment holds a record with (deliverAfter, offset) > `key` (any
        record, if `key` is None). O(log segments)."""
        if not self._by_max_key:
            return False
        if key is None:
            return True
        da, off, _ = self._by_max_key[-1]
        return da > key[0] or (da == key[0] and off > key[1])

    def sealed_not_all_due(self, now: int) -> Iterator[LogSegment]:
        """Sealed segments holding a record with deliverAfter > `now`."""
        for _, _, base in self._by_max_key.irange(minimum=(now, _MAX, 0)):
            yield self._get(base)
