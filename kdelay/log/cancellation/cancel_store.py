"""CancelStore: every segment's cancellations of one partition (see journal.py for the
files and the crash reasoning). The Log holds one and calls it under its lock.

Durability rules kept here:
* a MOVE (reschedule intent) is fsync'd before the copy's bytes are written;
* CONFIRMs are written only after the .log holding the copies was fsync'd (`log_synced`);
* a checkpoint (roll, close, or enough recent cancellations) first confirms, then fsyncs
  the journals, then writes each changed segment's cache.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...index.entry import E_BASE_OFFSET, E_LAST_OFFSET_DELTA
from .journal import CANCEL, CONFIRM, MOVE, VOID, CopyCheck, encode_entry
from .per_batch import cancelled_per_batch
from .segment_cancels import SegmentCancels

_MIN_RECENT = 1024  # recent offsets a segment may hold in memory before its cache is redone
_MAX_RECENT = 65536


def _threshold(sc: SegmentCancels) -> int:
    """Recent offsets a segment keeps in memory before its cache is rewritten: a quarter of
    the cache (so rewrites cost O(1) amortised per cancellation), within [1 Ki, 64 Ki] (so
    the heap they take stays bounded: ~40 B each in the SortedList)."""
    return min(_MAX_RECENT, max(_MIN_RECENT, len(sc) // 4))


class CancelStore:
    def __init__(self, directory: str):
        self.directory = directory
        self._segs: dict[int, SegmentCancels] = {}
        self._unconfirmed: list[tuple[int, int]] = []  # (segment base, offset)
        self.problems: list[str] = []
        # bumped whenever a segment's cancelled offsets change, so that a reader keeping
        # them (the fetch's merge, fetch/planner.py) redoes only those changed since
        self.changes = 0
        self._changed: dict[int, int] = {}  # base -> `changes` at its last change

    @classmethod
    def open(cls, directory: str, segments: Iterable[tuple[int, int]], *,
             recovered: Iterable[int] = (), copy_check: CopyCheck | None = None
             ) -> CancelStore:
        """A store loaded with the cancellations of `segments` (see `load`)."""
        store = cls(directory)
        store.load(segments, recovered=recovered, copy_check=copy_check)
        return store

    def load(self, segments: Iterable[tuple[int, int]], *, recovered: Iterable[int] = (),
             copy_check: CopyCheck | None = None) -> None:
        """Load the cancellations of `segments` ((base, next_offset) pairs). Segments in
        `recovered` (scanned by crash recovery: their end may have moved) are replayed and
        resolved against the log through `copy_check`; the rest open from their caches
        (one header read each)."""
        store = self
        directory = self.directory
        recovered = set(recovered)
        for base, next_offset in segments:
            sc = SegmentCancels.open(directory, base, next_offset,
                                     check_range=base in recovered, copy_check=copy_check,
                                     problems=store.problems)
            if sc is not None:
                store._segs[base] = sc

    # ------------------------------------------------------------------ queries

    def get(self, base: int) -> SegmentCancels | None:
        """The segment's cancellations, or None when it has none (the fetch fast path)."""
        sc = self._segs.get(base)
        return sc if sc is not None and len(sc) else None

    def is_cancelled(self, base: int, offset: int) -> bool:
        sc = self._segs.get(base)
        return sc is not None and offset in sc

    def total(self) -> int:
        return sum(len(sc) for sc in self._segs.values())

    def per_segment(self) -> dict[int, int]:
        return {b: len(sc) for b, sc in self._segs.items() if len(sc)}

    def recent_total(self) -> int:
        return sum(sc.recent_count for sc in self._segs.values())

    def _touched(self, base: int) -> None:
        self.changes += 1
        self._changed[base] = self.changes

    def changed_since(self, seen: int) -> list[int]:
        """Bases of the segments whose cancelled offsets changed after `changes` was
        `seen`. O(segments ever changed)."""
        return [b for b, at in self._changed.items() if at > seen]

    def _seg(self, base: int) -> SegmentCancels:
        sc = self._segs.get(base)
        if sc is None:
            sc = self._segs[base] = SegmentCancels(self.directory, base)
        return sc

    # ------------------------------------------------------------------ writing

    def cancel(self, by_segment: dict[int, list[int]]) -> None:
        """Journal and apply plain cancellations (not fsync'd: see `sync`)."""
        for base, offsets in by_segment.items():
            sc = self._seg(base)
            sc.write([encode_entry(CANCEL, o) for o in offsets])
            sc.add(offsets)
            self._touched(base)

    def begin_move(self, base: int, offset: int, copy_offset: int, copy_crc: int) -> None:
        """Journal the reschedule intent durably; the copy may be written after this."""
        sc = self._seg(base)
        sc.write([encode_entry(MOVE, offset, copy_offset, copy_crc)])
        sc.sync()

    def end_move(self, base: int, offset: int) -> None:
        """The copy is appended: the original is cancelled (confirmed at the next sync)."""
        self._seg(base).add((offset,))
        self._touched(base)
        self._unconfirmed.append((base, offset))

    def abort_move(self, base: int, offset: int) -> None:
        """The copy was not appended: settle the intent as void. Best effort: if this is
        lost too, recovery finds no copy carrying the recorded CRC and voids it anyway."""
        self._seg(base).write([encode_entry(VOID, offset)])

    @property
    def moves_unconfirmed(self) -> bool:
        """Are there reschedules whose copy is not yet known to be durable?"""
        return bool(self._unconfirmed)

    def log_synced(self) -> None:
        """The .log is fsync'd up to its end: every move so far has a durable copy."""
        if not self._unconfirmed:
            return
        by_seg: dict[int, list[bytes]] = {}
        for base, offset in self._unconfirmed:
            if base in self._segs:
                by_seg.setdefault(base, []).append(encode_entry(CONFIRM, offset))
        self._unconfirmed = []
        for base, entries in by_seg.items():
            self._segs[base].write(entries)

    def sync(self) -> None:
        """fsync every journal written since its last fsync."""
        for sc in self._segs.values():
            sc.sync()

    def needs_checkpoint(self) -> bool:
        """Too much held in memory: recent offsets of a segment past its threshold, or many
        moves waiting for their CONFIRM (the caller fsyncs the .log, then checkpoints)."""
        return len(self._unconfirmed) > _MIN_RECENT or any(
            sc.recent_count > _threshold(sc) for sc in self._segs.values())

    def checkpoint(self, *, everything: bool) -> None:
        """Write the caches of changed segments (every one, or those over the threshold).
        The caller has fsync'd the .log (and so may confirm moves)."""
        self.log_synced()
        for sc in self._segs.values():
            if sc.cache_current:
                continue
            if everything or sc.recent_count > _threshold(sc):
                sc.persist()

    def settled_between(self, first: int, end: int) -> list[int]:
        """Cancelled offsets in [first, end), sorted, that may be removed from the log (by
        compaction): all but the originals of moves not yet confirmed, which a crash could
        still make live again."""
        out: list[int] = []
        for _, sc in sorted(self._segs.items()):
            if len(sc):
                out += sc.in_range(first, end - 1)
        if self._unconfirmed and out:
            pending = {o for _, o in self._unconfirmed}
            out = [o for o in out if o not in pending]
        return out

    def prune(self, segments) -> None:
        """After compaction: drop the cancellations of records no longer in the log (their
        segment is gone, or the rewrite left them out). A segment with a move still
        unconfirmed is left for a later prune (rewriting would settle that move)."""
        unsettled = {b for b, _ in self._unconfirmed}
        for base in list(self._segs):
            sc = self._segs[base]
            try:
                seg = segments[base]
            except KeyError:
                self.drop(base)
                continue
            if not len(sc) or base in unsettled:
                continue
            cols = seg.dly_index.columns()
            kept = present_offsets(sc.offsets(), np.asarray(cols[E_BASE_OFFSET]),
                                   np.asarray(cols[E_LAST_OFFSET_DELTA]))
            if len(kept) != len(sc):
                sc.rewrite(set(kept.tolist()))
                self._touched(base)

    def would_strand(self, merged_away: Iterable[int], merged) -> bool:
        """Would a merge lose a cancellation? True when a segment about to be merged into
        another (its base offset in `merged_away`) has a cancelled offset that survives in
        the `merged` segment: it is recorded under a base that goes away (a cancel made
        while compaction was rewriting, or a move not yet confirmed). O(cancellations of
        those segments + their search in the merged segment's batches)."""
        cols = merged.dly_index.columns()
        first = np.asarray(cols[E_BASE_OFFSET])
        lod = np.asarray(cols[E_LAST_OFFSET_DELTA])
        for base in merged_away:
            sc = self._segs.get(base)
            if sc is not None and len(sc) and len(present_offsets(sc.offsets(), first, lod)):
                return True
        return False

    def dirty(self) -> bool:
        """Anything a checkpoint would write (a cache behind its journal, a CONFIRM due)."""
        return bool(self._unconfirmed) or any(not sc.cache_current
                                              for sc in self._segs.values())

    def forget_below(self, start: int) -> None:
        """Segments below `start` are deleted (retention): drop their cancellations."""
        for base in [b for b in self._segs if b < start]:
            self.drop(base)

    def drop(self, base: int) -> None:
        """The segment is deleted: so are its cancellation files."""
        sc = self._segs.pop(base, None)
        if sc is not None:
            sc.delete()
            self._touched(base)
        self._unconfirmed = [(b, o) for b, o in self._unconfirmed if b != base]

    def close(self) -> None:
        for sc in self._segs.values():
            sc.close()


def present_offsets(offsets: np.ndarray, first: np.ndarray, lod: np.ndarray) -> np.ndarray:
    """The sorted `offsets` that some batch (first offset, last offset delta) holds: each
    batch covers a slice of `offsets` (cancelled_per_batch); an offset is kept when a
    slice covers it (starts minus ends so far, counted in one pass)."""
    if not len(offsets) or not len(first):
        return offsets[:0]
    start, count = cancelled_per_batch(offsets, first.astype(np.int64), lod.astype(np.int64) + 1)
    edges = len(offsets) + 1
    covering = np.bincount(start, minlength=edges) - np.bincount(start + count, minlength=edges)
    return offsets[np.cumsum(covering)[:-1] > 0]
