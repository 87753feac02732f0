"""Lag: how many records are due and not yet consumed past a committed position.

Pure numpy over DeliverAfterIndex columns, so the facade's `metrics` and the tools'
`stats` count the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..log.cancellation.per_batch import cancelled_per_batch


def due_after(deliver_after: np.ndarray, base_offset: np.ndarray,
              last_offset_delta: np.ndarray, now: int,
              keys: Sequence[tuple[int, int] | None],
              cancelled: np.ndarray | None = None) -> list[int]:
    """For each key (a committed (deliverAfter, offset), or None for "from the start"), the
    records due at `now` whose (deliverAfter, offset) is after it: whole batches past the
    key's deliverAfter, plus the part of each batch at that deliverAfter whose offsets are
    past the key's offset. With `cancelled` (sorted offsets, each once), cancelled records
    are left out: what a reader at that key still gets.

    The columns are one index's, sorted by (deliverAfter, base offset) as persisted (for
    batches of several segments, sort with np.lexsort first or call per segment).
    O(batches + cancelled) once, then O(log batches + batches at the key's deliverAfter)
    per key."""
    j_now = int(np.searchsorted(deliver_after, now, side="right"))
    if j_now == 0:
        return [0] * len(keys)
    da = deliver_after[:j_now]
    counts = last_offset_delta[:j_now].astype(np.int64) + 1
    firsts = base_offset[:j_now].astype(np.int64)
    ends = firsts + counts  # last offset + 1 of each batch
    gone = None if cancelled is None or not len(cancelled) else \
        cancelled_per_batch(cancelled, firsts, counts)
    live = counts if gone is None else counts - gone.cancelled
    suffix = np.concatenate([np.cumsum(live[::-1])[::-1], [0]])  # records in [i, j_now)
    out = []
    for key in keys:
        if key is None:
            out.append(int(suffix[0]))
            continue
        k_da, k_off = key
        lo = int(np.searchsorted(da, k_da, side="left"))
        hi = int(np.searchsorted(da, k_da, side="right"))
        partial = 0
        if hi > lo:
            partial = int(np.clip(ends[lo:hi] - 1 - k_off, 0, counts[lo:hi]).sum())
            if gone is not None and cancelled is not None:  # less those past the key's
                first_past = int(cancelled.searchsorted(k_off, side="right"))
                start, n = gone.start[lo:hi], gone.cancelled[lo:hi]
                partial -= int(np.clip(start + n - first_past, 0, n).sum())
        out.append(partial + int(suffix[hi]))
    return out
