"""Making tiered logs for tests and benchmarks: copy a log's sealed segments to a
store with the copier (kdelay/log/tiered/copier.py), then make some remote-only by
deleting their local .log and indexes (their `N.remote` marker and cancel files stay), as
local retention does."""

from __future__ import annotations

import contextlib
import os

from kdelay import Log, LogConfig
from kdelay.log.cancellation.journal import read_cancelled
from kdelay.log.segments.layout import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    MARKER_SUFFIX,
    segment_bases,
    segment_file,
)
from kdelay.log.tiered.copier import copy_segment
from kdelay.log.tiered.tier import RemoteTier, record_settings


def tier_out(path: str, config: LogConfig, *, remote_only: int | None = None) -> list[int]:
    """Copy every sealed segment of the (closed) log at `path` to `config`'s store and
    record the store in the directory; then delete the local files of the first
    `remote_only` copied segments (all of them when None). Returns the copied bases."""
    with Log.open(path, config=config) as log:
        tier = RemoteTier(path, config)
        sealed = [s for s in log._segments if s is not log._segments.active]
        for seg in sealed:
            seg.remote = copy_segment(tier, seg, read_cancelled(path, seg.base_offset))
        bases = [s.base_offset for s in sealed]
    record_settings(path, config)
    drop_local(path, bases[:remote_only])
    return bases


def drop_local(path: str, bases: list[int]) -> None:
    """Delete the local .log, indexes and compaction marker of copied segments."""
    assert set(bases) <= set(segment_bases(path))
    for base in bases:
        for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES, MARKER_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segment_file(path, base, suffix))
