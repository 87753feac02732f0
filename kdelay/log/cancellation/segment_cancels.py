"""SegmentCancels: one segment's cancelled offsets in memory and on disk (the file formats
and the crash reasoning are in journal.py): the journal it appends to, the mmap'd
cache it serves from, the offsets added since, and how a segment's files are opened,
replayed, rewritten and persisted."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

import numpy as np
from sortedcontainers import SortedList

from ... import fsio
from ...errors import IndexFileError
from ...index.index_file import IndexMeta, load_index, read_meta, write_index
from ..segments.layout import segment_file
from .journal import (
    CACHE_DTYPES,
    CANCEL,
    CANCEL_INDEX_SUFFIX,
    INDEX_MAGIC,
    JOURNAL_SUFFIX,
    NO_OFFSETS,
    CopyCheck,
    cache_beyond_journal,
    cache_is_current,
    cancelled_in_journal,
    encode_entry,
    journal_header,
    read_generation,
    read_journal,
    replay,
)


class SegmentCancels:
    """One segment's cancelled offsets: the mmap'd cache plus those added since."""

    def __init__(self, directory: str, base_offset: int):
        self.base_offset = base_offset
        self.journal_path = segment_file(directory, base_offset, JOURNAL_SUFFIX)
        self.index_path = segment_file(directory, base_offset, CANCEL_INDEX_SUFFIX)
        self.generation = 0
        self.journal_size = 0  # 0: no journal file yet
        self._cache_bytes = 0  # the journal size the cache file covers
        self._fd = -1
        self._disk: np.ndarray | None = NO_OFFSETS  # None: trusted cache not mapped yet
        self._disk_count = 0
        self._recent = SortedList()
        self._recent_array: np.ndarray | None = None  # _recent as an array, once asked for
        self.unsynced = False  # journal bytes written since its last fsync
        self.cache_current = True  # the cache covers the whole journal
        self._created = False  # the journal file was created since its directory's fsync

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return self._disk_count + len(self._recent)

    @property
    def recent_count(self) -> int:
        return len(self._recent)

    def _mapped(self) -> np.ndarray:
        if self._disk is None:
            try:
                meta, (col,) = load_index(self.index_path, INDEX_MAGIC, CACHE_DTYPES,
                                          base_offset=self.base_offset,
                                          log_bytes=self._cache_bytes)
                if not cache_is_current(meta, self.base_offset, self._cache_bytes,
                                        self.generation):
                    raise IndexFileError(f"{self.index_path}: generation {meta.next_offset}, "
                                         f"journal has {self.generation}")
                if len(col) > 1 and not bool(np.all(col[1:] > col[:-1])):
                    raise IndexFileError(f"{self.index_path}: offsets not strictly sorted")
            except IndexFileError:
                # the header said current at open but the data does not check out: the
                # journal is still the truth (read-only here: CONFIRMs are all in it); the
                # next checkpoint rewrites the cache, and kdelay verify reports the damage.
                # Entries written since the open are in the journal and among the recent.
                state = cancelled_in_journal(self.journal_path, self.base_offset)
                col = np.array(sorted(state.difference(self._recent)), dtype=np.int64)
                self.cache_current = False
            self._disk = col
            self._disk_count = len(col)
        return self._disk

    def cache_current_after_map(self) -> bool:
        """Map the cache; False if its data turned out damaged (then rebuilt in memory)."""
        self._mapped()
        return self.cache_current

    def __contains__(self, offset: int) -> bool:
        if offset in self._recent:
            return True
        disk = self._mapped()
        i = int(np.searchsorted(disk, offset))
        return i < len(disk) and int(disk[i]) == offset

    def in_range(self, lo: int, hi: int) -> list[int]:
        """Cancelled offsets in [lo, hi], sorted. O(log n + k)."""
        disk = self._mapped()
        out: list[int] = []
        if len(disk):
            i = int(disk.searchsorted(lo))  # the method: no dispatch wrapper per call
            j = int(disk.searchsorted(hi, side="right"))
            if j > i:
                out = disk[i:j].tolist()
        if self._recent:
            more = list(self._recent.irange(lo, hi))
            if more:
                out = sorted(out + more) if out else more
        return out

    def count_in_range(self, lo: int, hi: int) -> int:
        """How many offsets in [lo, hi] are cancelled. O(log n)."""
        disk = self._mapped()
        n = 0
        size = len(disk)
        if size:
            # offsets are unique and sorted: "all of [lo, hi]" and "none of it" need one
            # search and one look (the usual cases), anything else a second search
            i = int(disk.searchsorted(lo))
            last = i + hi - lo
            if last < size and disk[last] == hi:
                n = hi - lo + 1
            elif i < size and disk[i] <= hi:
                n = int(disk.searchsorted(hi, side="right")) - i
        if self._recent:
            n += self._recent.bisect_right(hi) - self._recent.bisect_left(lo)
        return n

    def sorted_parts(self) -> tuple[np.ndarray, np.ndarray]:
        """Every cancelled offset as two sorted int64 arrays, mapped and recent (their
        union is `offsets()`, without the copy and sort of the mapped ones)."""
        if self._recent_array is None:
            self._recent_array = np.fromiter(self._recent, np.int64, len(self._recent))
        return self._mapped(), self._recent_array

    def offsets(self) -> np.ndarray:
        """Every cancelled offset, sorted (a copy when some are recent)."""
        disk = self._mapped()
        if not self._recent:
            return disk
        both = np.concatenate([disk, np.array(list(self._recent), dtype=np.int64)])
        both.sort()
        return both

    # ------------------------------------------------------------------ writing

    def write(self, entries: list[bytes]) -> None:
        """Append entries to the journal (creating it, header first, if needed)."""
        data = b"".join(entries)
        created = False
        if self._fd < 0:
            created = not os.path.exists(self.journal_path)
            self._fd = fsio.open_append(self.journal_path)
            if created:
                data = journal_header(self.base_offset, self.generation) + data
                self.journal_size = 0
        pos = self.journal_size
        try:
            fsio.write(self._fd, data, pos)
        except OSError:
            with contextlib.suppress(OSError):  # recovery cuts a part-slot too
                fsio.truncate(self._fd, pos)
            raise
        self.journal_size = pos + len(data)
        self.unsynced = True
        self.cache_current = False
        if created:
            self._created = True

    def add(self, offsets: Iterable[int]) -> None:
        self._recent.update(offsets)
        self._recent_array = None

    def discard(self, offset: int) -> None:
        self._recent.discard(offset)
        self._recent_array = None

    def _set_recent(self, recent: SortedList) -> None:
        """`recent` as the offsets cancelled since the cache was written."""
        self._recent = recent
        self._recent_array = None

    def sync(self) -> None:
        """fsync the journal (and its directory entry, the first time)."""
        if self._fd >= 0 and self.unsynced:
            fsio.fsync(self._fd)
            if self._created:
                fsio.fsync_dir(os.path.dirname(self.journal_path))
                self._created = False
            self.unsynced = False

    def persist(self) -> None:
        """Write the cache over the whole journal (journal fsync'd first) and map it."""
        self.sync()
        col = self.offsets()
        write_index(self.index_path, INDEX_MAGIC,
                    IndexMeta(self.base_offset, self.journal_size, self.generation, len(col)),
                    [np.ascontiguousarray(col, dtype=np.int64)])
        self._disk = None
        self._disk_count = len(col)
        self._cache_bytes = self.journal_size
        self._set_recent(SortedList())
        self.cache_current = True
        self._mapped()

    def rewrite(self, state: set[int]) -> None:
        """Replace the journal by plain CANCELs of `state` (generation + 1), then the cache."""
        self.close()
        self.generation += 1
        body = b"".join(encode_entry(CANCEL, o) for o in sorted(state))
        data = journal_header(self.base_offset, self.generation) + body
        fsio.atomic_write(self.journal_path, data)
        self.journal_size = len(data)
        self._disk = NO_OFFSETS
        self._disk_count = 0
        self._set_recent(SortedList(state))
        self.unsynced = False
        self.persist()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        fsio.unlink(self.journal_path)
        fsio.unlink(self.index_path)

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, directory: str, base_offset: int, next_offset: int, *,
             check_range: bool, copy_check: CopyCheck | None,
             problems: list[str]) -> SegmentCancels | None:
        """The segment's cancellations, or None if it has no journal. A cache that matches
        the journal is trusted (one header read); otherwise, or with `check_range` (a
        segment that recovery scanned, whose end may have moved), the journal is replayed,
        dropped and unsettled entries are resolved, and journal and cache are rewritten."""
        sc = cls(directory, base_offset)
        try:
            size = os.path.getsize(sc.journal_path)
        except FileNotFoundError:
            fsio.unlink(sc.index_path)  # a cache without its journal describes nothing
            return None
        gen = read_generation(sc.journal_path, base_offset)
        if gen is not None:
            try:
                meta, _ = read_meta(sc.index_path, INDEX_MAGIC)
                if cache_is_current(meta, base_offset, size, gen):
                    sc.generation, sc.journal_size = gen, size
                    sc._cache_bytes = size
                    sc._disk, sc._disk_count = None, meta.entries
                    # a segment whose end recovery may have moved: every cancelled offset
                    # must still be inside it (the cache is sorted: one look at the last)
                    if not check_range or not len(sc) or \
                            (sc.cache_current_after_map() and
                             int(sc._mapped()[-1]) < next_offset):
                        return sc
            except IndexFileError:
                pass
        scan = read_journal(sc.journal_path, base_offset)
        for pos, what in scan.problems:
            problems.append(f"{sc.journal_path} at byte {pos}: {what}")
        state, changed = replay(scan.entries, next_offset, base_offset, copy_check)
        lost = cache_beyond_journal(sc.index_path, base_offset, scan)
        if lost is not None:
            # the journal is shorter than a sound cache of it: its tail was lost (a journal
            # only grows). Keep what the cache knew rather than resurrect those records.
            problems.append(f"{sc.journal_path} at byte {scan.size}: journal shorter than "
                            f"its cache covers ({lost[0]} bytes): entries lost")
            state |= {o for o in lost[1] if base_offset <= o < next_offset}
            changed = True
        sc.generation = scan.generation or 0
        sc.journal_size = scan.size
        if changed or scan.problems:
            sc.rewrite(state)
        else:
            sc._disk, sc._disk_count = NO_OFFSETS, 0
            sc._set_recent(SortedList(state))
            sc.persist()
        return sc
