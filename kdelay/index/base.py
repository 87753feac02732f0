"""What the three index kinds share: columns persisted in one file (see index_file.py),
plus entries appended since, held in memory until the segment rolls or the log closes."""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np

from .index_file import IndexMeta, load_index, write_index

_generations = itertools.count(1)


class AbstractIndex:
    MAGIC: ClassVar[bytes]
    DTYPES: ClassVar[list[np.dtype]]

    def __init__(self, base_offset: int, columns: list[np.ndarray] | None = None):
        self.base_offset = base_offset
        # persisted part: memmap'd columns; in-memory part: entries appended since
        self._columns = columns if columns is not None else [np.empty(0, d) for d in self.DTYPES]
        # changes whenever the persisted columns are replaced: readers that remember
        # positions in them key those positions by (base_offset, generation)
        self.generation = next(_generations)

    @classmethod
    def load(cls, path: str, *, base_offset: int, log_bytes: int):
        """Map the persisted index; raises IndexFileError if missing, stale or corrupt."""
        meta, columns = load_index(path, cls.MAGIC, cls.DTYPES, base_offset=base_offset,
                                   log_bytes=log_bytes)
        index = cls(base_offset, columns)
        index.meta = meta
        return index

    def persist(self, path: str, *, log_bytes: int, next_offset: int) -> None:
        """Write every entry atomically, then serve them from the mapped file."""
        columns = self.columns()
        meta = IndexMeta(self.base_offset, log_bytes, next_offset, len(columns[0]))
        write_index(path, self.MAGIC, meta, columns)
        loaded = type(self).load(path, base_offset=self.base_offset, log_bytes=log_bytes)
        self._columns = loaded._columns
        self.generation = next(_generations)
        self.meta = meta
        self._clear_pending()

    # subclasses: the full, ordered columns (persisted + pending) and pending bookkeeping
    def columns(self) -> list[np.ndarray]:
        raise NotImplementedError

    def _clear_pending(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def disk_columns(self) -> list[np.ndarray]:
        return self._columns

    def disk_bytes(self) -> int:
        return sum(c.nbytes for c in self._columns)


class AppendOnlyIndex(AbstractIndex):
    """An index whose keys only grow (offset index, time index): new entries go on a list."""

    def __init__(self, base_offset: int, columns: list[np.ndarray] | None = None):
        super().__init__(base_offset, columns)
        self._pending: list[tuple[int, ...]] = []

    def add(self, *entry: int) -> None:
        self._pending.append(entry)

    def _clear_pending(self) -> None:
        self._pending = []

    def __len__(self) -> int:
        return len(self._columns[0]) + len(self._pending)

    def columns(self) -> list[np.ndarray]:
        if not self._pending:
            return [np.asarray(c) for c in self._columns]
        fresh = list(zip(*self._pending, strict=True))
        return [np.concatenate([c, np.array(f, dtype=d)])
                for c, f, d in zip(self._columns, fresh, self.DTYPES, strict=True)]

    def last_key(self) -> int | None:
        if self._pending:
            return self._pending[-1][0]
        if len(self._columns[0]):
            return int(self._columns[0][-1])
        return None

    def floor(self, key: int) -> tuple[int, ...] | None:
        """The entry with the greatest key <= `key`, or None."""
        if self._pending and self._pending[0][0] <= key:
            lo, hi = 0, len(self._pending)
            while hi - lo > 1:  # bisect on the first field
                mid = (lo + hi) // 2
                if self._pending[mid][0] <= key:
                    lo = mid
                else:
                    hi = mid
            return self._pending[lo]
        keys = self._columns[0]
        i = int(np.searchsorted(keys, key, side="right")) - 1
        if i < 0:
            return None
        return tuple(int(c[i]) for c in self._columns)

    def memory_bytes(self) -> int:
        return len(self._pending) * 120  # a 2-tuple of ints plus the list slot, roughly
