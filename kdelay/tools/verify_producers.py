"""`kdelay verify`'s check of a partition's producer-state snapshot (`producer-state.snapshot`,
the broker's idempotent producers: kdelay/broker/producer_snapshot.py): it reads back whole
(magic, CRC, entries), its offset is within the log, and each batch it remembers, where the
log still holds a batch at that base offset, is that producer's batch of that epoch and
first sequence. A damaged snapshot is never trusted: the broker rebuilds the state from
the log (reported as a problem all the same: it means damage on disk). O(producers)."""

from __future__ import annotations

import os

from ..broker.producer_snapshot import SNAPSHOT_FILE, SnapshotDamagedError, read_snapshot
from .scanning import VerifyReport


def check_producer_snapshot(rep: VerifyReport, directory: str,
                            producer_batches: dict[int, tuple[int, int, int]],
                            log_end: int | None) -> None:
    """Check the snapshot of `directory` (if any) against the log: `producer_batches` maps
    the base offset of every local batch written by an idempotent producer to its
    (producer id, epoch, first sequence); `log_end` is the log's next offset."""
    path = os.path.join(directory, SNAPSHOT_FILE)
    try:
        snapshot = read_snapshot(directory)
    except SnapshotDamagedError as e:
        rep.add(True, path, None, f"producer-state snapshot damaged: {e} (the broker "
                                  f"rebuilds producer state from the log)")
        return
    if snapshot is None:
        return
    offset, producers = snapshot
    if log_end is not None and offset > log_end:
        rep.add(True, path, None, f"producer-state snapshot is at offset {offset}, past the "
                                  f"log end {log_end} (the broker rebuilds producer state "
                                  f"from the log)")
        return
    wrong = 0
    for pid, entry in producers.items():
        for first, _, base in entry.batches:
            held = producer_batches.get(base)
            if held is not None and held != (pid, entry.epoch, first):
                wrong += 1
                if wrong <= 10:
                    rep.add(True, path, None,
                            f"producer-state snapshot says producer {pid} epoch "
                            f"{entry.epoch} wrote sequence {first} at offset {base}; the log "
                            f"holds producer {held[0]} epoch {held[1]} sequence {held[2]} "
                            f"there")
