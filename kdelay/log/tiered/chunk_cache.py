"""ChunkCache: the bytes of one remote .log fetched so far, in a sparse local file.

The object is cut into fixed chunks; a bitmap in memory says which are here. `ensure`
takes the byte ranges a reader is about to read (a window of index entries), fetches the
chunks missing among them in one coalesced ranged read, and writes them into the file at
their own positions, so the file maps like the .log itself (`mapped()`: the compiled page
fill reads batches through it exactly as through a local segment). A chunk is fetched at
most once while it is cached.

The file is unlinked as soon as it is created: nothing is left behind by a crash, no other
process (a Spark task reading the same directory) shares it, and dropping the cache
(`drop`) frees its space once the last mapping of it is gone: a page fill still reading
through the old mapping keeps seeing the bytes it was given.

Not thread-safe by itself: its remote segment serialises calls.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence

import numpy as np

from ...errors import CorruptLogError
from ..segments.mapped_file import MappedFile

CHUNK = 256 << 10  # bytes per chunk: the unit fetched and cached

Fetch = Callable[[Sequence[int], Sequence[int]], list[bytes]]  # ranges -> their bytes


def chunks_needed(starts: np.ndarray, ends: np.ndarray, chunk: int, count: int) -> np.ndarray:
    """A mask over `count` chunks of those the byte ranges [starts[i], ends[i]) touch
    (empty ranges touch none)."""
    keep = ends > starts
    first, last = starts[keep] // chunk, (ends[keep] - 1) // chunk
    marks = np.zeros(count + 1, np.int64)
    np.add.at(marks, first, 1)
    np.add.at(marks, last + 1, -1)
    return np.cumsum(marks[:-1]) > 0


def runs_of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, end) chunk numbers of each run of consecutive True values in `mask`."""
    at = np.flatnonzero(mask)
    if not len(at):
        return at, at
    cut = np.flatnonzero(np.diff(at) != 1)
    return at[np.r_[0, cut + 1]], at[np.r_[cut, len(at) - 1]] + 1


class ChunkCache:
    def __init__(self, cache_dir: str, size: int, fetch: Fetch, where: str,
                 chunk: int = CHUNK):
        self.size = size
        self.chunk = chunk
        self._fetch = fetch
        self._where = where  # the object's full name, for errors
        self._cache_dir = cache_dir
        self._have = np.zeros(-(-size // chunk), bool)
        self._fd = -1
        self._mapped: MappedFile | None = None
        self.cached_bytes = 0
        self.generation = 0  # counts drops: what was ensured before one is gone

    def ensure(self, starts: np.ndarray, ends: np.ndarray) -> int:
        """Make the byte ranges [starts[i], ends[i]) readable; returns the bytes fetched.
        Raises RemoteStorageError (store), CorruptLogError (a range past the object's
        end, or an object shorter than its manifest says)."""
        if len(ends) and int(ends.max()) > self.size:
            raise CorruptLogError(f"a read reaches byte {int(ends.max())} of an object of "
                                  f"{self.size} bytes", self._where, self.size)
        missing = chunks_needed(starts, ends, self.chunk, len(self._have)) & ~self._have
        first, end = runs_of(missing)
        if not len(first):
            return 0
        byte_starts = (first * self.chunk).tolist()
        byte_ends = np.minimum(end * self.chunk, self.size).tolist()
        parts = self._fetch(byte_starts, byte_ends)
        fd = self._file()
        for start, stop, data in zip(byte_starts, byte_ends, parts, strict=True):
            if len(data) != stop - start:
                raise CorruptLogError(f"the store returned {len(data)} bytes for "
                                      f"[{start}, {stop}): the object is shorter than its "
                                      f"manifest says ({self.size} bytes)", self._where,
                                      start + len(data))
            os.pwrite(fd, data, start)
        self._have |= missing
        fetched = sum(byte_ends) - sum(byte_starts)
        self.cached_bytes += fetched
        return fetched

    def read(self, position: int, length: int) -> bytes:
        """Bytes [position, position + length), fetched first if need be."""
        self.ensure(np.array([position]), np.array([position + length]))
        return os.pread(self._fd, length, position) if length else b""

    def mapped(self) -> MappedFile:
        """The cache file mapped (readable where `ensure` made it so)."""
        if self._mapped is None:
            self._mapped = MappedFile(self._file(), max(self.size, 1))
        return self._mapped

    def drop(self) -> None:
        """Forget every chunk and let the file go. The mapping is not closed: a page fill
        may still hold it (it is unmapped when the last reference goes)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._mapped = None
        self._have[:] = False
        self.cached_bytes = 0
        self.generation += 1

    def _file(self) -> int:
        if self._fd < 0:
            os.makedirs(self._cache_dir, exist_ok=True)
            fd, path = tempfile.mkstemp(dir=self._cache_dir, suffix=".chunks")
            os.unlink(path)  # see the module's docstring
            os.ftruncate(fd, self.size)  # sparse: only fetched chunks take space
            self._fd = fd
        return self._fd
