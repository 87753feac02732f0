"""Runs: one segment's DeliverAfterIndex entries after a cursor, in (deliverAfter, offset)
order, consumed one head at a time by the page merge (due_merge.py).

A ColumnRun walks persisted, memmap'd (immutable) columns; a RecentRun walks the active
segment's entries appended since its index was last persisted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from ..index.deliver_after_index import Entry
from ..log.batch import codec

_FIRST_CHUNK = 8
_MAX_CHUNK = 64  # bounds the Python tuples a remembered run holds


class BatchSource(Protocol):
    """What the merge needs of a segment."""

    log_path: str

    def read_verified(self, entry: Entry) -> tuple[codec.BatchHeader, bytes]: ...


class ColumnRun:
    """Entries of immutable index columns from index `start` on, converted to Python
    tuples a growing chunk at a time (a short page converts only a few)."""

    __slots__ = ("seg", "key", "cols", "i", "n", "head", "_buf", "_b0", "_chunk")

    def __init__(self, seg: BatchSource, key: tuple, cols: list[np.ndarray], start: int):
        self.seg, self.key, self.cols = seg, key, cols
        self.i, self.n = start, len(cols[0])
        self._chunk = _FIRST_CHUNK
        self._buf: list[Entry] = []
        self._b0 = start
        self.head: Entry | None = None
        if start < self.n:
            self._fill()

    def _fill(self) -> None:
        i, j = self.i, min(self.n, self.i + self._chunk)
        self._buf = list(zip(*(c[i:j].tolist() for c in self.cols), strict=True))
        self._b0 = i
        self._chunk = min(self._chunk * 4, _MAX_CHUNK)
        self.head = self._buf[0]

    def advance(self) -> None:
        self.i += 1
        k = self.i - self._b0
        if k < len(self._buf):
            self.head = self._buf[k]
        elif self.i < self.n:
            self._fill()
        else:
            self.head = None


class RecentRun:
    """The active segment's entries not yet persisted (in memory and growing, so never
    remembered across pages)."""

    __slots__ = ("seg", "head", "_it")

    def __init__(self, seg: BatchSource, entries: Iterator[Entry]):
        self.seg = seg
        self._it = entries
        self.head = next(entries, None)

    def advance(self) -> None:
        self.head = next(self._it, None)


