"""Retention: which of the oldest sealed segments may be deleted.

A segment goes when every record in it has been due for longer than `retention_ms`, or,
while the log is over `retention_bytes`, when every record in it is due. Deletion runs
from the oldest segment and stops at the first one that must stay (offsets stay
contiguous from the log start); the active segment is never deleted.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ... import fsio
from ...config import LogConfig
from .segment_set import SegmentSet


def enforce(segments: SegmentSet, config: LogConfig, now: int, directory: str,
            before_first_delete: Callable[[], None]) -> int:
    """Delete what retention allows; returns how many segments went. `before_first_delete`
    runs once before anything is deleted (the Log clears its clean-shutdown marker).
    O(segments deleted)."""
    deleted = 0
    total = sum(s.size for s in segments)
    while len(segments) > 1:
        seg = segments.oldest
        key = seg.max_key
        last_due = key[0] if key is not None else -1
        expired = config.retention_ms >= 0 and now - last_due > config.retention_ms
        oversize = (config.retention_bytes >= 0 and total > config.retention_bytes
                    and last_due <= now)
        if not (expired or oversize):
            break
        if not deleted:
            before_first_delete()
        # the .log goes first: if that fails the segment stays, whole and in the set, and
        # the offsets stay contiguous; once it is gone the set forgets it (a failure on
        # an index file after that leaves an orphan the next open removes)
        try:
            seg.delete()
        finally:
            if not os.path.exists(seg.log_path):
                segments.remove_oldest()
        total -= seg.size
        deleted += 1
    if deleted:
        fsio.fsync_dir(directory)
    return deleted
