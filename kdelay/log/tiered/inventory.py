"""A partition directory's segments as offline readers see them (the CLI, Spark): local
`.log` files and remote-only segments, from the directory's files alone, no store request.

Which segments exist is the loader's word (layout.classify, the one listing both take):
a segment is local while its `.log` is in the directory, and has a committed remote copy
when its `N.remote` marker (remote_marker.py) is there too; a marker without a `.log` is a
remote-only segment, whose bytes are read from the store. A segment whose marker is
renamed `N.remote-deleting` is being deleted by retention and is not listed (an open
finishes the deletion; nothing serves it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import CorruptLogError
from ..segments.layout import LOG_SUFFIX, Listing, classify_directory, segment_file
from .manifest import RemoteCopy
from .remote_marker import read_remote_marker

__all__ = ["ListedSegment", "list_all_segments"]


@dataclass(frozen=True)
class ListedSegment:
    """One segment of the directory: its base offset, its local .log's size (None: remote
    only) and its committed remote copy (None: not copied)."""

    base_offset: int
    log_size: int | None
    remote: RemoteCopy | None

    @property
    def remote_only(self) -> bool:
        return self.log_size is None

    @property
    def size(self) -> int:
        """Bytes of its .log, wherever that is."""
        if self.log_size is not None:
            return self.log_size
        assert self.remote is not None
        return self.remote.size


def list_all_segments(directory: str, *, damaged: list[CorruptLogError] | None = None,
                      listing: Listing | None = None) -> list[ListedSegment]:
    """Every segment of the directory in offset order, local and remote-only; one listed
    but deleted before it was looked at (retention) is left out. `listing`: the caller's
    own `classify` of the directory (else it is listed here). Raises OSError if the
    directory is unreadable, CorruptLogError if a marker is damaged (with `damaged`: the
    error, naming the marker, is added to it instead, and the segment listed as if it had
    none)."""
    if listing is None:
        listing = classify_directory(directory)
    local = set(listing.local)
    out = []
    for base in listing.bases:
        size = None
        if base in local:
            try:
                size = os.path.getsize(segment_file(directory, base, LOG_SUFFIX))
            except FileNotFoundError:
                size = None  # deleted since the listing: local retention, or retention
        remote = None
        try:
            remote = read_remote_marker(directory, base) if base in listing.copied else None
        except CorruptLogError as e:
            if damaged is None:
                raise
            damaged.append(e)
        if size is None and remote is None:
            continue
        out.append(ListedSegment(base, size, remote))
    return out
