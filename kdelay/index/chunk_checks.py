"""Lazy checking of a persisted index's entries, chunk by chunk (the chunks and their CRC
table are laid out in index_file.py).

Opening an index checks its header, its chunk table and its first and last chunk (which
opening a log reads); any other chunk is checked against its CRC the first time a read
needs one of its entries, and remembered as checked (a byte per chunk). Checking a chunk is one crc32c call per column over the mapped bytes, so what a
read pays is per chunk it touches, never per entry.

Readers ask before they use persisted entries: `check(start, stop)` for a range,
`check_all()` for all of them, `search_right` for a search, `window_end` for the page
fill's windows. A chunk that fails its CRC raises CorruptLogError naming the index file and
the byte where the chunk's entries start, and none of its entries is used. The mapped file
(`file_id`) is then removed, if it is still in place, so that the next open rebuilds that
index from its .log as it rebuilds any missing index.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import TypeVar

import crc32c
import numpy as np

from .. import fsio
from ..errors import CorruptLogError

FileId = tuple[int, int]  # (st_dev, st_ino) of the file a mapping was made from
# a key that `certify` compares: a deliverAfter, or a (deliverAfter, offset)
Key = TypeVar("Key", int, tuple[int, int])


def chunk_crc(columns: list[np.ndarray], start: int, stop: int) -> int:
    """The one rule for a chunk's checksum: CRC-32C of entries [start, stop) of every
    column, one column after the other in the kind's column order."""
    crc = 0
    for column in columns:
        crc = crc32c.crc32c(column[start:stop].data, crc)
    return crc


def chunk_table(columns: list[np.ndarray], chunk_entries: int) -> np.ndarray:
    """The CRC of every chunk of `chunk_entries` entries (the last may be shorter)."""
    n = len(columns[0]) if columns else 0
    return np.array([chunk_crc(columns, a, min(a + chunk_entries, n))
                     for a in range(0, n, chunk_entries)], dtype="<u4")


class ChunkChecks:
    """Which chunks of one mapped index's columns are checked, checking the others on
    demand. Entries [0, `checked_prefix`) are checked; `complete` once every chunk is
    (readers skip the checks then)."""

    __slots__ = ("path", "columns", "n", "chunk_entries", "complete", "checked_prefix",
                 "_table", "_checked", "_first_byte", "_file_id")

    def __init__(self, path: str, columns: list[np.ndarray], table: np.ndarray,
                 chunk_entries: int, *, first_byte: int = 0, file_id: FileId | None = None):
        self.path = path
        self.columns = columns
        self.n = len(columns[0]) if columns else 0
        self.chunk_entries = chunk_entries
        self._table = table
        self._checked = bytearray(len(table))
        self.complete = not len(table)
        self.checked_prefix = self.n if self.complete else 0
        self._first_byte = first_byte  # where the first column starts in the file
        self._file_id = file_id

    @classmethod
    def trusted(cls, columns: list[np.ndarray]) -> ChunkChecks:
        """Columns with nothing left to check: built in memory, or checked whole."""
        return cls("", columns, np.empty(0, np.uint32), 1)

    def span(self, chunk: int) -> tuple[int, int]:
        """The entries [start, stop) of chunk `chunk`."""
        start = chunk * self.chunk_entries
        return start, min(start + self.chunk_entries, self.n)

    def check(self, start: int, stop: int) -> None:
        """Check every chunk holding one of the entries [start, stop) not checked yet."""
        if self.complete or start >= stop:
            return
        c = self.chunk_entries
        for k in range(start // c, (stop - 1) // c + 1):
            if not self._checked[k] and not self._holds(k):
                self._fail(k)

    def check_all(self) -> None:
        self.check(0, self.n)

    def check_around(self, j: int) -> None:
        """Check entries j - 1 and j (those that exist)."""
        self.check(max(j - 1, 0), min(j + 1, self.n))

    def damaged(self, chunks: Iterable[int] | None = None) -> list[int]:
        """Check `chunks` (default: every chunk) not checked yet, raising nothing: those
        that fail."""
        todo = range(len(self._table)) if chunks is None else sorted(set(chunks))
        return [k for k in todo if not self._checked[k] and not self._holds(k)]

    @property
    def ends(self) -> tuple[int, ...]:
        """The first and the last chunk (none if there are no entries)."""
        return (0, len(self._table) - 1) if len(self._table) else ()

    def window_end(self, start: int, count: int) -> int:
        """Check the chunks holding entries [start, start + count) (at least entry `start`)
        and return where the checked entries from `start` on end: the end of the last
        chunk checked, or of the columns."""
        if self.complete:
            return self.n
        stop = min(self.n, start + max(count, 1))
        self.check(start, stop)
        c = self.chunk_entries
        return min(self.n, -(-stop // c) * c)

    def certify(self, j: int, below: Key | None, above: Key | None, x: Key) -> None:
        """Make `j`, found by a search over unchecked bytes as the first entry whose key
        is > `x` in columns sorted by key, trustworthy; `below` and `above` are the keys of
        entries j - 1 and j as mapped (None where there is none). In a sound file those
        two entries alone decide whether `j` is the answer, so they are checked; if their
        keys do not bear it out, damage elsewhere misled the search, and checking every
        chunk raises at it (numpy's binary search probes both neighbours of its answer,
        so with them sound it is right: the comparison is a net under any other)."""
        if j >= self.checked_prefix:  # else both lie in the checked prefix
            self.check_around(j)
        if (below is not None and below > x) or (above is not None and above <= x):
            self.check_all()

    def search_right(self, column: np.ndarray, x: int) -> int:
        """np.searchsorted(column, x, side="right") on one of these sorted columns, with the
        answer certified (see `certify`): its entries j - 1 and j are checked."""
        j = int(np.searchsorted(column, x, side="right"))
        if not self.complete:
            self.certify(j, column[j - 1] if j else None,
                         column[j] if j < self.n else None, x)
        return j

    def _holds(self, chunk: int) -> bool:
        start, stop = self.span(chunk)
        if chunk_crc(self.columns, start, stop) != self._table[chunk]:
            return False
        self._checked[chunk] = 1
        # recomputed from the flags, never counted: two threads may check chunks at once
        # (a stale prefix only has a reader check again)
        k = self.checked_prefix // self.chunk_entries
        while k < len(self._checked) and self._checked[k]:
            k += 1
        self.checked_prefix = min(self.n, k * self.chunk_entries)
        self.complete = k == len(self._checked)
        return True

    def _fail(self, chunk: int) -> None:
        start, stop = self.span(chunk)
        position = self._first_byte + start * self.columns[0].itemsize
        what = f"index entries {start}..{stop - 1} fail their chunk checksum"
        if self._file_id is not None and _remove_if_same(self.path, self._file_id):
            what += "; the file is removed, and the next open rebuilds it from the .log"
        raise CorruptLogError(what, self.path, position)


def _remove_if_same(path: str, file_id: FileId) -> bool:
    """Remove the file at `path` if it is still the one `file_id` names (an index replaced
    since, by a roll or a compaction, is sound and stays). True if removed."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if (st.st_dev, st.st_ino) == file_id:
            fsio.unlink(path)
            return True
    return False
