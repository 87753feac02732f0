"""Retention: which of the oldest sealed segments may be deleted.

A segment goes when every record in it has been due for longer than `retention_ms`, or,
while the log is over `retention_bytes`, when every record in it is due. Deletion runs
from the oldest segment and stops at the first one that must stay (offsets stay
contiguous from the log start); the active segment is never deleted.

With tiered storage the rule spans the whole log: segments held only in the object store
count with their copies' .log bytes and are deleted like local ones. A segment with a
committed remote copy first renames its `N.remote` to `N.remote-deleting` (durably): from
then on it is never served again, not even by an open after a crash (the loader deletes
what is left of it locally), and the sync deletes the remote copy (tiered/tier_retention.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from ... import fsio
from ...config import LogConfig
from ..segments.layout import REMOTE_DELETING_SUFFIX, REMOTE_SUFFIX, segment_file
from ..segments.segment_set import SegmentSet


def enforce(segments: SegmentSet, config: LogConfig, now: int, directory: str,
            before_first_delete: Callable[[], None],
            busy: Callable[[object], bool] = lambda seg: False) -> int:
    """Delete what retention allows; returns how many segments went. `before_first_delete`
    runs once before anything is deleted (the Log clears its clean-shutdown marker);
    deletion stops at a segment `busy` holds (one being copied to the object store).
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
        if not (expired or oversize) or busy(seg):
            break
        if not deleted:
            before_first_delete()
        # a segment with a copy gives it up first, durably; so does one whose `N.remote`
        # is there but damaged (the open took it as not copied): left behind, it would
        # bring the deleted segment back from the store at the next open
        marked = seg.remote is not None or os.path.exists(
            segment_file(directory, seg.base_offset, REMOTE_SUFFIX))
        if marked:
            begin_remote_deletion(directory, seg.base_offset)
        # the .log goes first: if that fails the segment stays, whole and in the set, and
        # the offsets stay contiguous; once it is gone the set forgets it (a failure on
        # an index file after that leaves an orphan the next open removes)
        try:
            seg.delete()
        finally:
            if not os.path.exists(seg.log_path):
                segments.remove_oldest()
            elif marked:  # still served locally: its copy stays too
                with contextlib.suppress(OSError):
                    _rename_marker(directory, seg.base_offset, REMOTE_DELETING_SUFFIX,
                                   REMOTE_SUFFIX)
        total -= seg.size
        deleted += 1
    if deleted:
        fsio.fsync_dir(directory)
    return deleted


def begin_remote_deletion(directory: str, base_offset: int) -> None:
    """Mark segment `base_offset`'s remote copy as being deleted: `N.remote` renamed to
    `N.remote-deleting`, durably, before anything of the segment is deleted."""
    _rename_marker(directory, base_offset, REMOTE_SUFFIX, REMOTE_DELETING_SUFFIX)


def _rename_marker(directory: str, base_offset: int, old: str, new: str) -> None:
    fsio.rename(segment_file(directory, base_offset, old),
                segment_file(directory, base_offset, new))
    fsio.fsync_dir(directory)
