"""`N.remote`: the directory's record that segment N's copy is committed, the committed
manifest's bytes (manifest.py); renamed `N.remote-deleting` while retention deletes the
copy (retention.py). The copier and an adoption at open write it; the loader, the sync,
and the offline readers (CLI, Spark) read it, all through this pair.
"""

from __future__ import annotations

from ... import fsio
from ..segments.layout import REMOTE_SUFFIX, segment_file
from .manifest import RemoteCopy, decode, encode

__all__ = ["read_remote_marker", "write_remote_marker"]


def write_remote_marker(directory: str, copy: RemoteCopy) -> None:
    """Record (atomically) that segment `copy.base_offset`'s copy is committed."""
    fsio.atomic_write(segment_file(directory, copy.base_offset, REMOTE_SUFFIX), encode(copy))


def read_remote_marker(directory: str, base_offset: int, suffix: str = REMOTE_SUFFIX
                       ) -> RemoteCopy | None:
    """The RemoteCopy that segment `base_offset`'s marker (`N.remote`, or with `suffix`
    `N.remote-deleting`) records, or None if there is none. Raises CorruptLogError naming
    the marker if it is damaged or records another segment's copy."""
    path = segment_file(directory, base_offset, suffix)
    raw = fsio.read_small(path)
    return None if raw is None else decode(raw, path, base_offset)
