"""What the three index kinds share: columns persisted in one file (see index_file.py),
plus entries appended since, held in memory until the segment rolls or the log closes.

The persisted columns of an index the Log opened are checked chunk by chunk as reads reach
them (chunk_checks.py): every method here and in the kinds asks `_checks` before it uses a
persisted entry, and `disk_columns` hands them out checked whole."""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_right
from typing import ClassVar

import numpy as np

from .chunk_checks import ChunkChecks
from .index_file import (
    IndexMeta,
    IndexReading,
    encode_index,
    map_index,
    read_lenient,
    write_index,
)

_generations = itertools.count(1)


class AbstractIndex:
    MAGIC: ClassVar[bytes]
    DTYPES: ClassVar[list[np.dtype]]
    NAME: ClassVar[str]  # how tools call it
    COLUMNS: ClassVar[tuple[str, ...]]  # the column names, in DTYPES' order

    def __init__(self, base_offset: int, columns: list[np.ndarray] | None = None):
        self.base_offset = base_offset
        # persisted part: memmap'd columns; in-memory part: entries appended since
        self._columns = columns if columns is not None else [np.empty(0, d) for d in self.DTYPES]
        self._checks = ChunkChecks.trusted(self._columns)
        # changes whenever the persisted columns are replaced: readers that remember
        # positions in them key those positions by (base_offset, generation)
        self.generation = next(_generations)

    @classmethod
    def load(cls, path: str, *, base_offset: int, log_bytes: int, lazy: bool = False):
        """Map the persisted index; raises IndexFileError if missing, stale or corrupt.
        With `lazy`, its chunks are checked as reads reach them (the Log's segments: see
        chunk_checks.py), else all of them now."""
        meta, columns, checks = map_index(path, cls.MAGIC, cls.DTYPES, base_offset=base_offset,
                                          log_bytes=log_bytes, lazy=lazy)
        index = cls(base_offset, columns)
        index._checks = checks
        index.meta = meta
        return index

    @classmethod
    def read_lenient(cls, path: str) -> IndexReading:
        """For tools: whatever the file holds, and why it is unreadable (see index_file)."""
        return read_lenient(path, cls.MAGIC, cls.DTYPES)

    @classmethod
    def entry_size(cls) -> int:
        return sum(d.itemsize for d in cls.DTYPES)

    def persist(self, path: str, *, log_bytes: int, next_offset: int,
                atomic: bool = True) -> None:
        """Write every entry (atomically, unless the caller publishes the file by a rename
        of its own), then serve them from the mapped file, checking its chunks as reads
        reach them. Every persisted entry is checked first (`columns`), so a damaged one
        is never written out under a fresh checksum."""
        columns = self.columns()
        meta = IndexMeta(self.base_offset, log_bytes, next_offset, len(columns[0]))
        write_index(path, self.MAGIC, meta, columns, atomic=atomic)
        loaded = type(self).load(path, base_offset=self.base_offset, log_bytes=log_bytes,
                                 lazy=True)
        self._columns = loaded._columns
        self._checks = loaded._checks
        self.generation = next(_generations)
        self.meta = meta
        self._clear_recent()

    def encoded(self, *, log_bytes: int, next_offset: int) -> bytes:
        """The bytes `persist` would write (tiered storage uploads them as the file)."""
        columns = self.columns()
        return encode_index(self.MAGIC, IndexMeta(self.base_offset, log_bytes, next_offset,
                                                  len(columns[0])), columns)

    # subclasses: the full, ordered columns (persisted + recent) and recent bookkeeping
    def columns(self) -> list[np.ndarray]:
        raise NotImplementedError

    def _clear_recent(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def disk_columns(self) -> list[np.ndarray]:
        """The persisted columns, every chunk checked."""
        self._checks.check_all()
        return self._columns

    @property
    def chunks(self) -> ChunkChecks:
        """The persisted columns (`chunks.columns`, as mapped) and which are checked: for
        readers that check only what they reach (the fetch's runs)."""
        return self._checks

    def disk_bytes(self) -> int:
        return sum(c.nbytes for c in self._columns)


class AppendOnlyIndex(AbstractIndex):
    """An index whose keys only grow (offset index, time index): entries appended since the
    last persist go into one int64 array per column (8 bytes a field, no tuple per entry)."""

    def __init__(self, base_offset: int, columns: list[np.ndarray] | None = None):
        super().__init__(base_offset, columns)
        self._clear_recent()

    def add(self, *entry: int) -> None:
        for col, value in zip(self._recent, entry, strict=True):
            col.append(value)

    def _clear_recent(self) -> None:
        self._recent = [array("q") for _ in self.DTYPES]

    def __len__(self) -> int:
        return len(self._columns[0]) + len(self._recent[0])

    def columns(self) -> list[np.ndarray]:
        self._checks.check_all()
        if not self._recent[0]:
            return [np.asarray(c) for c in self._columns]
        return [np.concatenate([c, np.frombuffer(f, dtype=np.int64).astype(d)])
                for c, f, d in zip(self._columns, self._recent, self.DTYPES, strict=True)]

    def last_key(self) -> int | None:
        keys = self._recent[0]
        if keys:
            return keys[-1]
        n = len(self._columns[0])
        if n:
            self._checks.check(n - 1, n)
            return int(self._columns[0][-1])
        return None

    def floor(self, key: int) -> tuple[int, ...] | None:
        """The entry with the greatest key <= `key`, or None."""
        i = bisect_right(self._recent[0], key) - 1
        if i >= 0:
            return tuple(col[i] for col in self._recent)
        i = self._checks.search_right(self._columns[0], key) - 1
        if i < 0:
            return None
        return tuple(int(c[i]) for c in self._columns)

    def memory_bytes(self) -> int:
        return len(self._recent[0]) * 8 * len(self.DTYPES)
