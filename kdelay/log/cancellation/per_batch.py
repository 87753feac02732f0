"""Cancelled offsets by batch: where a batch's cancelled offsets sit in a sorted array of
them, and so how many it has. The one place that lays cancellations over batches, for
compaction's plan and rewrite, the store's pruning after compaction, and `kdelay stats`."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class PerBatch(NamedTuple):
    start: np.ndarray  # index in `cancelled` of the batch's first cancelled offset
    cancelled: np.ndarray  # how many of the batch's offsets are cancelled
    # (not `count`, which would shadow tuple.count)


def cancelled_per_batch(cancelled: np.ndarray, first: np.ndarray | int,
                        count: np.ndarray | int) -> PerBatch:
    """Batch i, offsets first[i] .. first[i] + count[i] - 1, holds the cancelled offsets
    cancelled[start[i]:start[i] + count[i]] (`cancelled` sorted, each offset once). Batches
    in any order, all in one numpy pass; single ints give one batch's answer."""
    start = cancelled.searchsorted(first)  # the method: no dispatch wrapper per call
    return PerBatch(start, cancelled.searchsorted(first + count) - start)
