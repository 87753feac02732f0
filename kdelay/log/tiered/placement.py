"""Where a log's segments are, counted one way for `log.metrics()["remote"]` and for
`kdelay stats` (which has only the directory's files).

A segment is local while its `.log` is on the local disk, and remote once its copy is
committed in the store: a copied segment whose local files are still there counts as
both (`segments_local` and `segments_remote`, its bytes in `bytes_local` and
`bytes_remote`); a remote-only segment only as remote. `copies_pending` counts the sealed
local segments with no committed copy yet (the active segment is never copied).
"""

from __future__ import annotations

from collections.abc import Sequence

from .manifest import RemoteCopy

__all__ = ["placement_counts"]


def placement_counts(segments: Sequence[tuple[int | None, RemoteCopy | None]]) -> dict:
    """`segments_local`, `segments_remote`, `bytes_local`, `bytes_remote`, `copies_pending`
    of a log's segments in offset order, each given as (bytes of its local .log, None if it
    has none; its committed copy, None if it has none); the last is the active segment."""
    local = [size for size, _ in segments if size is not None]
    copies = [copy for _, copy in segments if copy is not None]
    return {
        "segments_local": len(local),
        "segments_remote": len(copies),
        "bytes_local": sum(local),
        "bytes_remote": sum(copy.size for copy in copies),
        "copies_pending": sum(1 for size, copy in segments[:-1]
                              if size is not None and copy is None),
    }
