"""A remote segment's indexes, fetched once into the local cache and loaded from there.

Each index object (`N.C.index`, `.timeindex`, `.dlyindex`) is fetched whole with one
request, checked against the size and CRC-32C its manifest records, and written to
`<dir>/remote-cache/` under its object name (copies are immutable, so a file there is
reused as it is by later opens). It is then loaded by the index's own loader, which checks
that it covers exactly the segment's bytes and ends at its end offset. A cached file that
fails those checks (local damage) is fetched again; an object that fails them is damage in
the store: CorruptLogError naming the object. Spark's readers take the same two steps
(`checked_index_object`, `load_copy_index`) through a temporary file instead.

The files count against the log's cache bound like the fetched bytes: they go when their
segment is evicted from the cache or deleted (`remove_cached_indexes`), and an open removes
those of copies that are no longer a remote-only segment of the log (`remove_stale_files`).
"""

from __future__ import annotations

import contextlib
import os

from ... import fsio
from ...errors import CorruptLogError, IndexFileError
from ...index.base import AbstractIndex
from ...remote.store import RemoteStore
from ..segments.layout import INDEX_SUFFIXES
from .manifest import RemoteCopy, parse_object_name
from .remote_marker import read_remote_marker
from .tier import RemoteTier


def cached_index_path(tier: RemoteTier, copy: RemoteCopy, suffix: str) -> str:
    """The cache file of `copy`'s index object `suffix` (named as the object)."""
    return os.path.join(tier.cache_dir, copy.object_name(suffix))


def cached_index_bytes(tier: RemoteTier, copy: RemoteCopy) -> int:
    """The bytes of `copy`'s index files in the cache (left there by an earlier open)."""
    total = 0
    for suffix in INDEX_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(cached_index_path(tier, copy, suffix))
    return total


def remove_cached_indexes(tier: RemoteTier, copy: RemoteCopy) -> None:
    for suffix in INDEX_SUFFIXES:
        fsio.unlink(cached_index_path(tier, copy, suffix))


def remove_stale_files(tier: RemoteTier, remote_only: list[int]) -> None:
    """Remove every file of the cache but the index files of the remote-only segments
    `remote_only` (their bases) in their committed copies: what an earlier process left of
    segments deleted since, or held locally, and temporary files."""
    try:
        names = os.listdir(tier.cache_dir)
    except FileNotFoundError:
        return
    keep = set(remote_only)
    copy_ids: dict[int, str | None] = {}
    for name in names:
        parsed = parse_object_name(name)
        if parsed is not None and parsed[0] in keep and parsed[2] in INDEX_SUFFIXES:
            if parsed[0] not in copy_ids:
                copy_ids[parsed[0]] = _marked_copy_id(tier.directory, parsed[0])
            if copy_ids[parsed[0]] == parsed[1]:
                continue
        fsio.unlink(os.path.join(tier.cache_dir, name))


def _marked_copy_id(directory: str, base: int) -> str | None:
    """The copy id segment `base`'s `N.remote` marker records (None: damaged)."""
    try:
        copy = read_remote_marker(directory, base)
    except CorruptLogError:
        return None
    return None if copy is None else copy.copy_id


def load_remote_index(tier: RemoteTier, copy: RemoteCopy, suffix: str,
                      kind: type[AbstractIndex]) -> tuple[AbstractIndex, int]:
    """(the index `suffix` of `copy`, the bytes its cached file added to the cache: 0 if
    it was there already). Raises CorruptLogError (a damaged or missing index object,
    named) or RemoteStorageError."""
    where = tier.store.describe(copy.object_name(suffix))
    path = cached_index_path(tier, copy, suffix)
    if os.path.exists(path):
        with contextlib.suppress(IndexFileError, CorruptLogError):
            return load_copy_index(path, copy, kind, where), 0
        fsio.unlink(path)  # damaged locally: fetch it again
    data = checked_index_object(tier.store, copy, suffix)
    os.makedirs(tier.cache_dir, exist_ok=True)
    fsio.atomic_write(path, data, sync_dir=False)  # a cache: losing it costs a fetch
    try:
        return load_copy_index(path, copy, kind, where), len(data)
    except IndexFileError as e:
        fsio.unlink(path)
        raise CorruptLogError(f"index object does not index this copy: {e}", where) from None


def checked_index_object(store: RemoteStore, copy: RemoteCopy, suffix: str) -> bytes:
    """`copy`'s index object `suffix`, fetched whole and checked against the size and
    CRC-32C its manifest records. Raises CorruptLogError naming the object (damaged, or
    not in the manifest), RemoteStorageError (ObjectMissingError: not in the store)."""
    name = copy.object_name(suffix)
    where = store.describe(name)
    if suffix not in copy.objects:
        raise CorruptLogError(f"the manifest of this copy names no {suffix} object", where)
    data = store.get(name)
    copy.check_object(suffix, data, where)
    return data


def load_copy_index(path: str, copy: RemoteCopy, kind: type[AbstractIndex], where: str
                    ) -> AbstractIndex:
    """The index file at `path` (a copy's index object `where`), loaded only if it covers
    exactly `copy`'s bytes and ends at its end offset. Raises IndexFileError, or
    CorruptLogError naming `where`."""
    index = kind.load(path, base_offset=copy.base_offset, log_bytes=copy.size)
    if index.meta.next_offset != copy.next_offset:
        raise CorruptLogError(f"index ends at offset {index.meta.next_offset}, the copy at "
                              f"{copy.next_offset}", where)
    return index
