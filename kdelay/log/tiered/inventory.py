"""A partition directory's segments as offline readers see them (the CLI, Spark): local
`.log` files and remote-only segments, from the directory's files alone, no store request.

A segment is local while its `.log` is in the directory; it also has a committed remote
copy when its `N.remote` marker (the committed manifest's bytes, manifest.py) is there. A
marker without a `.log` is a remote-only segment: its bytes are read from the store. A
segment whose marker is renamed `N.remote-deleting` is being deleted by retention and is
not listed (an open finishes the deletion; nothing serves it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ... import fsio
from ...errors import CorruptLogError
from ..segments.layout import (
    LOG_SUFFIX,
    REMOTE_SUFFIX,
    parse_segment_name,
    segment_file,
)
from .manifest import RemoteCopy, decode

__all__ = ["ListedSegment", "list_segments", "read_marker", "remote_only", "segment_bases",
           "split_bases"]


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


def read_marker(directory: str, base_offset: int) -> RemoteCopy | None:
    """The RemoteCopy that segment `base_offset`'s `N.remote` marker records, or None if it
    has none. Raises CorruptLogError naming the marker if it is damaged."""
    path = segment_file(directory, base_offset, REMOTE_SUFFIX)
    raw = fsio.read_small(path)
    return None if raw is None else decode(raw, path)


def split_bases(names: list[str]) -> tuple[set[int], set[int]]:
    """(bases with a .log, bases with an `N.remote` marker) of a directory listing."""
    logs: set[int] = set()
    markers: set[int] = set()
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is None:
            continue
        if parsed[1] == LOG_SUFFIX:
            logs.add(parsed[0])
        elif parsed[1] == REMOTE_SUFFIX:
            markers.add(parsed[0])
    return logs, markers


def segment_bases(names: list[str]) -> list[int]:
    """The base offsets of every segment, local or remote-only, of a directory listing."""
    logs, markers = split_bases(names)
    return sorted(logs | markers)


def list_segments(directory: str, *, damaged: list[str] | None = None
                  ) -> list[ListedSegment]:
    """Every segment of the directory in offset order, local and remote-only; one listed
    but deleted before it was looked at (retention) is left out. Raises OSError if the
    directory is unreadable, CorruptLogError if a marker is damaged (with `damaged`: the
    marker's path is added to it instead, and the segment listed as if it had none)."""
    logs, markers = split_bases(os.listdir(directory))
    out = []
    for base in sorted(logs | markers):
        size = None
        if base in logs:
            try:
                size = os.path.getsize(segment_file(directory, base, LOG_SUFFIX))
            except FileNotFoundError:
                size = None  # deleted since the listing: local retention, or retention
        remote = None
        try:
            remote = read_marker(directory, base) if base in markers else None
        except CorruptLogError:
            if damaged is None:
                raise
            damaged.append(segment_file(directory, base, REMOTE_SUFFIX))
        if size is None and remote is None:
            continue
        out.append(ListedSegment(base, size, remote))
    return out


def remote_only(directory: str) -> dict[int, RemoteCopy]:
    """base offset -> RemoteCopy of the directory's remote-only segments."""
    return {s.base_offset: s.remote for s in list_segments(directory)
            if s.remote_only and s.remote is not None}
