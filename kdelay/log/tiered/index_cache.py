"""A remote segment's indexes, fetched once into the local cache and loaded from there.

Each index object (`N.C.index`, `.timeindex`, `.dlyindex`) is fetched whole with one
request, checked against the size and CRC-32C its manifest records, and written to
`<dir>/remote-cache/` under its object name (copies are immutable, so a file there is
reused as it is by later opens). It is then loaded by the index's own loader, which checks
that it covers exactly the segment's bytes and ends at its end offset. A cached file that
fails those checks (local damage) is fetched again; an object that fails them is damage in
the store: CorruptLogError naming the object.
"""

from __future__ import annotations

import contextlib
import os

from ... import fsio
from ...errors import CorruptLogError, IndexFileError
from ...index.base import AbstractIndex
from .manifest import RemoteCopy
from .tier import RemoteTier


def load_remote_index(tier: RemoteTier, copy: RemoteCopy, suffix: str,
                      kind: type[AbstractIndex]) -> tuple[AbstractIndex, int]:
    """(the index `suffix` of `copy`, the bytes its cached file takes). Raises
    CorruptLogError (a damaged or missing index object, named) or RemoteStorageError."""
    name = copy.object_name(suffix)
    where = tier.store.describe(name)
    path = os.path.join(tier.cache_dir, name)
    if os.path.exists(path):
        with contextlib.suppress(IndexFileError, CorruptLogError):
            return _load(path, copy, kind, where)
        fsio.unlink(path)  # damaged locally: fetch it again
    if suffix not in copy.objects:
        raise CorruptLogError(f"the manifest of this copy names no {suffix} object", where)
    data = tier.store.get(name)
    copy.check_object(suffix, data, where)
    os.makedirs(tier.cache_dir, exist_ok=True)
    fsio.atomic_write(path, data, sync_dir=False)  # a cache: losing it costs a fetch
    try:
        return _load(path, copy, kind, where)
    except IndexFileError as e:
        fsio.unlink(path)
        raise CorruptLogError(f"index object does not index this copy: {e}", where) from None


def _load(path: str, copy: RemoteCopy, kind: type[AbstractIndex], where: str
          ) -> tuple[AbstractIndex, int]:
    index = kind.load(path, base_offset=copy.base_offset, log_bytes=copy.size)
    if index.meta.next_offset != copy.next_offset:
        raise CorruptLogError(f"index ends at offset {index.meta.next_offset}, the copy at "
                              f"{copy.next_offset}", where)
    return index, os.path.getsize(path)
