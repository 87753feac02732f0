"""RemoteSegment: a sealed segment whose .log and indexes are only in the object store.

It offers what the fetch layer reads of a LogSegment (offsets, size, the three indexes,
read_verified, batch_headers, find_batch/find_from, mapped), so the due-order merge, the
offset-order read, cancellation and metrics do not care where a segment lives:

- what the manifest says (offsets, size, max timestamp, min deliverAfter, largest key)
  costs no request: a segment nothing reads is never fetched from;
- its indexes are fetched once, on first use, into the local cache (index_cache.py);
- its bytes are fetched in chunks into a sparse local file (chunk_cache.py) that maps like
  the .log: a run of the due-order merge ensures the byte ranges of the entries the
  compiled page fill is about to read (`ensure_entries`, kdelay/fetch/runs.py), and every
  batch is checked exactly as a local one (entry and CRC-32C), so damage raises
  CorruptLogError naming the remote object;
- what it caches, its index files and its fetched bytes, is charged to the log's
  CacheBudget (LogConfig.remote_cache_bytes); past the bound the least recently used
  segments drop theirs (`evict`), deleting their index files.

The local directory keeps `N.remote` (the manifest) and the segment's cancellation files;
`path(suffix)` names those. A store that cannot be reached raises RemoteStorageError
(within LogConfig.remote_timeout_ms) from whichever read needed it, and is recorded as the
tier's last error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from ...errors import RemoteStorageError
from ...index.base import AbstractIndex
from ...index.deliver_after_index import DeliverAfterIndex
from ...index.entry import E_POSITION, E_SIZE, Entry
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex
from ..batch import codec
from ..batch.entry_check import check_batch
from ..segments.layout import (
    DLYINDEX_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    segment_file,
)
from ..segments.mapped_file import MappedFile
from ..segments.offset_lookup import OffsetLookup
from .chunk_cache import ChunkCache
from .index_cache import cached_index_bytes, load_remote_index, remove_cached_indexes
from .manifest import RemoteCopy
from .tier import RemoteTier

# batches whose bytes an offset-order walk fetches at once (one coalesced request)
_WALK_AHEAD = 256
_KINDS: dict[str, type[AbstractIndex]] = {
    DLYINDEX_SUFFIX: DeliverAfterIndex, INDEX_SUFFIX: OffsetIndex, TIMEINDEX_SUFFIX: TimeIndex}
_prefetcher: ThreadPoolExecutor | None = None
_prefetcher_lock = threading.Lock()

T = TypeVar("T")


class RemoteSegment(OffsetLookup):
    def __init__(self, directory: str, copy: RemoteCopy, tier: RemoteTier):
        self.directory = directory
        self.tier = tier
        self.remote = copy
        self.base_offset = copy.base_offset
        self.next_offset = copy.next_offset
        self.size = copy.size
        self.compacted = copy.compacted
        self.max_timestamp = copy.max_timestamp
        self.min_deliver_after = copy.min_deliver_after
        self.max_key = copy.max_key
        self.log_path = tier.store.describe(copy.object_name(LOG_SUFFIX))
        self._lock = threading.RLock()  # the caches: readers and prefetches
        self._indexes: dict[str, AbstractIndex] = {}
        self._by_position: tuple[np.ndarray, np.ndarray] | None = None
        self._bytes = ChunkCache(tier.cache_dir, copy.size, self._fetch_ranges, self.log_path)
        left = cached_index_bytes(tier, copy)  # by an earlier open: charged from the start
        if left:
            tier.cache_budget.charge(self, left, evict=False)

    def __repr__(self) -> str:
        return f"RemoteSegment({self.log_path})"

    def path(self, suffix: str) -> str:
        """The local file of this segment with `suffix` (`.remote`, the cancel files)."""
        return segment_file(self.directory, self.base_offset, suffix)

    # ------------------------------------------------------------------ indexes

    @property
    def dly_index(self) -> DeliverAfterIndex:
        return self._index(DLYINDEX_SUFFIX)

    @property
    def offset_index(self) -> OffsetIndex:
        return self._index(INDEX_SUFFIX)

    @property
    def time_index(self) -> TimeIndex:
        return self._index(TIMEINDEX_SUFFIX)

    def loaded_indexes(self) -> list[AbstractIndex]:
        """The indexes at hand (fetched already): what metrics may read without asking the
        store. O(1)."""
        return list(self._indexes.values())

    def has_index(self, suffix: str) -> bool:
        """Is index `suffix` at hand (no request needed to read it)? O(1)."""
        return suffix in self._indexes

    def _index(self, suffix: str):
        index = self._indexes.get(suffix)
        return self._load_index(suffix) if index is None else index

    def _load_index(self, suffix: str, *, evict: bool = True):
        with self._lock:
            index = self._indexes.get(suffix)
            if index is None:
                index, nbytes = self._reaching_store(load_remote_index, self.tier, self.remote,
                                                     suffix, _KINDS[suffix])
                self._indexes[suffix] = index
                self.tier.cache_budget.charge(self, nbytes, evict=evict)
            return index

    def prefetch_indexes(self, suffixes: Sequence[str]) -> None:
        """Fetch the indexes `suffixes` (those a read is about to need) in the background
        (a failure shows on the read that needs them). Charged to the cache without
        evicting anything: only readers evict, never while another holds its lock."""
        missing = [s for s in suffixes if s not in self._indexes]
        if not missing:
            return
        global _prefetcher
        with _prefetcher_lock:
            if _prefetcher is None:
                _prefetcher = ThreadPoolExecutor(4, thread_name_prefix="kdelay-prefetch")
        _prefetcher.submit(self._prefetch, missing)

    def _prefetch(self, suffixes: list[str]) -> None:
        for suffix in suffixes:
            try:
                self._load_index(suffix, evict=False)
            except Exception:  # noqa: BLE001 - the read that needs it raises it again
                return

    # ------------------------------------------------------------------ bytes

    def ensure_entries(self, columns: Sequence[np.ndarray], start: int, end: int) -> int:
        """Fetch what the batches of index entries [start, end) of `columns` (the dly
        index's) need that is not cached, in one coalesced request; returns the
        `cache_generation` they are cached in."""
        positions = columns[E_POSITION][start:end]
        return self._ensure(positions, positions + columns[E_SIZE][start:end])

    @property
    def cache_generation(self) -> int:
        """Changes when the cached bytes are dropped (what was ensured before is gone)."""
        return self._bytes.generation

    def _ensure(self, starts: np.ndarray, ends: np.ndarray) -> int:
        with self._lock:
            fetched = self._reaching_store(self._bytes.ensure, starts, ends)
            self.tier.cache_budget.charge(self, fetched)
            return self._bytes.generation

    def mapped(self) -> MappedFile:
        with self._lock:
            return self._bytes.mapped()

    def read_verified(self, entry: Entry) -> tuple[codec.BatchHeader, bytes]:
        position, size = entry.position, entry.size
        self._ensure(np.array([position]), np.array([position + size]))
        with self._lock:
            data = self._bytes.read(position, size)
        return check_batch(data, 0, entry, path=self.log_path), data

    def batch_headers(self, start: int = 0) -> Iterator[tuple[int, codec.BatchHeader]]:
        """(position, header) of each batch from byte `start`, at the positions the dly
        index holds (no walk of bytes not known to be a batch), fetched some batches
        ahead at a time."""
        positions, sizes = self._positions()
        i = int(np.searchsorted(positions, start))
        while i < len(positions):
            j = min(i + _WALK_AHEAD, len(positions))
            self._ensure(positions[i:j], positions[i:j] + sizes[i:j])
            for pos in positions[i:j].tolist():
                with self._lock:
                    head = self._bytes.read(pos, min(codec.HEADER_SIZE, self.size - pos))
                yield pos, codec.parse_header(head, 0, path=self.log_path, file_pos=pos,
                                              available=self.size - pos)
            i = j

    def _positions(self) -> tuple[np.ndarray, np.ndarray]:
        if self._by_position is None:
            cols = self.dly_index.columns()
            pos, size = cols[E_POSITION], cols[E_SIZE]
            order = np.argsort(pos, kind="stable")
            self._by_position = (pos[order], size[order].astype(np.int64))
        return self._by_position

    def _fetch_ranges(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        return self.tier.store.get_ranges(self.remote.object_name(LOG_SUFFIX), starts, ends)

    # ------------------------------------------------------------------ the cache

    def evict(self) -> None:
        """Drop the cached bytes and indexes, and delete the index files (CacheBudget: past
        its bound). Runs still reading an index keep their mapping of the deleted file."""
        with self._lock:
            self._drop()
            remove_cached_indexes(self.tier, self.remote)

    def close(self) -> None:
        """Drop what is cached in memory; the index files stay for the next open."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        self._bytes.drop()
        self._indexes.clear()
        self._by_position = None
        self.tier.cache_budget.release(self)

    def delete(self) -> None:
        """Retention of the whole log took the segment: its local cache goes, files and
        all (its remote copy is deleted by the sync, see tier_retention.py)."""
        self.evict()

    def _reaching_store(self, op: Callable[..., T], *args) -> T:
        """`op(*args)`, with the tier's last error kept up to date."""
        try:
            result = op(*args)
        except RemoteStorageError as e:
            self.tier.failed(e)
            raise
        return result
