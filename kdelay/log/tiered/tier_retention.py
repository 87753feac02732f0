"""Tiered storage's retention: which copied segments lose their local files (local
retention), and the deletion of a remote copy that retention of the whole log gave up.

Local retention keeps the recent segments on the local disk: a sealed segment whose copy
is committed loses its .log, indexes and compaction marker (its `N.remote` and its
cancellation files stay: it is then served from the store) once
`effective_local_retention_ms` have passed since its last record became due, or, oldest
first, while the local sealed bytes exceed `effective_local_retention_bytes`. A segment
not copied yet is never a candidate.

Deleting a remote copy (retention.py renamed its `N.remote` to `N.remote-deleting` and
dropped the segment): the manifest goes first, which uncommits the copy (a reader never
trusts objects no manifest names), then its objects, then the segment's cancellation files
and the marker. Every step is idempotent, so a crash anywhere is finished by the next sync.
"""

from __future__ import annotations

from ... import fsio
from ...config import LogConfig
from ...errors import CorruptLogError
from ...remote.store import RemoteStore
from ..segments.layout import (
    CANCEL_SUFFIXES,
    INDEX_SUFFIXES,
    MARKER_SUFFIX,
    REMOTE_DELETING_SUFFIX,
    segment_file,
)
from ..segments.segment import LogSegment
from ..segments.segment_set import SegmentSet
from .cancelled_object import CANCELLATIONS_SUFFIX
from .manifest import manifest_name
from .remote_marker import read_remote_marker

__all__ = ["delete_local_files", "delete_remote_copy", "local_retention_due"]


def local_retention_due(segments: SegmentSet, config: LogConfig, now: int
                        ) -> list[LogSegment]:
    """The copied sealed segments, oldest first, whose local files local retention deletes
    now (see the module docstring). O(segments)."""
    ms = config.effective_local_retention_ms
    limit = config.effective_local_retention_bytes
    local = [s for s in segments if isinstance(s, LogSegment) and s is not segments.active]
    excess = sum(s.size for s in local) - limit if limit >= 0 else 0
    due = []
    for seg in local:
        if seg.remote is None:
            continue
        key = seg.remote.max_key
        expired = ms >= 0 and now - (key[0] if key is not None else -1) > ms
        if expired or excess > 0:
            due.append(seg)
            excess -= seg.size
    return due


def delete_local_files(seg: LogSegment) -> None:
    """What is left of a segment now held remotely once its .log is gone: its indexes and
    compaction marker (not `N.remote`, not its cancellation files). The caller unlinked
    the .log under the log's lock and closes `seg` first."""
    for suffix in (*INDEX_SUFFIXES, MARKER_SUFFIX):
        fsio.unlink(seg.path(suffix))


def delete_remote_copy(store: RemoteStore, directory: str, base_offset: int) -> bool:
    """Finish deleting segment `base_offset` (its `N.remote-deleting` marker is there):
    its manifest, its objects, its cancellation files, the marker. Returns False when the
    marker was damaged (its objects, orphans now, are left to the orphan sweep). Raises
    RemoteStorageError (nothing is lost: the next sync starts again)."""
    marker = segment_file(directory, base_offset, REMOTE_DELETING_SUFFIX)
    try:
        copy = read_remote_marker(directory, base_offset, REMOTE_DELETING_SUFFIX)
    except CorruptLogError:
        copy = None  # its objects become orphans: the next orphan sweep removes them
    store.delete(manifest_name(base_offset))
    if copy is not None:
        # the manifest's objects, and the one the sync rewrites beside them
        for suffix in (*copy.objects, CANCELLATIONS_SUFFIX):
            store.delete(copy.object_name(suffix))
    for suffix in CANCEL_SUFFIXES:
        fsio.unlink(segment_file(directory, base_offset, suffix))
    fsio.unlink(marker)
    fsio.fsync_dir(directory)
    return copy is not None
