"""Coalescing nearby reads: items at known places (batches at byte positions, records at
offsets) become fewer, larger reads, each one span of the file or log.

One rule for every reader that gathers many items: a read takes consecutive items while the
whole span stays within `max_span` and no gap between neighbours exceeds `max_gap`; an item
longer than `max_span` is a read of its own. Greedy, in order: a read ends only where the
next item would break a limit (or where the caller says items must part, e.g. another file).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def coalesce(starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray, *,
             max_span: int, max_gap: int | None = None,
             apart: np.ndarray | None = None) -> list[tuple[int, int]]:
    """The reads covering items [starts[i], ends[i]) (in order, not overlapping), as index
    ranges [i, j) of consecutive items, in order: each spans ends[j - 1] - starts[i] <=
    `max_span` bytes (or offsets) unless it is a single item, has no gap starts[k] -
    ends[k - 1] over `max_gap` (None: any gap), and starts wherever `apart` (bool per item)
    is set. O(items) numpy work plus O(log items) per read."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    cut = np.zeros(len(starts), dtype=bool)  # a read must start at this item
    if max_gap is not None:
        cut[1:] = starts[1:] - ends[:-1] > max_gap
    if apart is not None:
        cut |= apart
    pieces = [0, *(np.flatnonzero(cut[1:]) + 1).tolist(), len(starts)]
    out = []
    for a, b in zip(pieces[:-1], pieces[1:], strict=True):
        i = a
        while i < b:
            # the items from i whose end stays within the span (ends rise: no overlaps)
            j = i + max(1, int(np.searchsorted(ends[i:b], starts[i] + max_span,
                                               side="right")))
            out.append((i, j))
            i = j
    return out
