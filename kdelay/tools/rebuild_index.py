"""`kdelay rebuild-index`: rebuild every segment's indexes from its .log, under the
directory's lock (the one command that writes)."""

from __future__ import annotations

import argparse
import os

from ..errors import InspectError, LogLockedError
from ..log.compaction import swap
from ..log.local.directory_lock import lock_holder, take_lock
from ..log.segments.segment import LogSegment
from .formatting import Out, err
from .progress import ProgressBar
from .scanning import existing, list_segments, partition_dirs

EXIT_OK, EXIT_PROBLEMS = 0, 1


def _lock(directory: str) -> int:
    try:
        return take_lock(directory)
    except LogLockedError as e:
        raise LogLockedError(f"{directory}: locked by {lock_holder(e.pid)} (an open Log); "
                             f"close it before rebuilding indexes", e.pid) from None


def cmd_rebuild_index(args: argparse.Namespace, out: Out) -> int:
    existing(args.dir)
    if not os.path.isdir(args.dir):
        raise InspectError(f"{args.dir}: not a directory; rebuild-index takes a log "
                               f"directory")
    dirs = partition_dirs(args.dir)
    failures = 0
    for directory in dirs:
        lock_fd = _lock(directory)
        try:
            swap.recover(directory)  # an interrupted compaction first, as Log.open does
            segments = list_segments(directory)
            bar = ProgressBar("rebuild-index", sum(s.log_size for s in segments))
            for s in segments:
                marker = swap.read_marker(directory, s.base_offset)  # None: not compacted
                seg, error = LogSegment.recover(directory, s.base_offset,
                                                index_interval_bytes=args.index_interval_bytes,
                                                check_crc=True, truncate=False,
                                                compacted_end=marker and marker.end_offset,
                                                bases_crc=marker and marker.bases_crc)
                try:
                    bar(s.log_size)
                    if error is not None:
                        # an index over the intact prefix would claim the whole file and
                        # hide the damage from the next open: leave this segment alone
                        failures += 1
                        bar.close()
                        err(f"NOT rebuilt: {error}; the next Log.open recovers it "
                            f"(see kdelay verify / dump-log)")
                        continue
                    seg.persist_indexes()
                    out.line(f"rebuilt {s.log_path}: {len(seg.dly_index)} batches, "
                             f"offsets {s.base_offset}..{seg.next_offset - 1}")
                finally:
                    seg.close()
            bar.close()
        finally:
            os.close(lock_fd)
    return EXIT_PROBLEMS if failures else EXIT_OK

