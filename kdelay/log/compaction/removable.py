"""Compaction's rule of what may go: a record is removable once it has been due for longer
than `retention_ms` (its batch's deliverAfter is below the horizon: the rule retention
applies to whole segments) or it is cancelled. Planning and rewriting both ask here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..cancellation.per_batch import cancelled_per_batch

# (first offset, end offset) -> the cancelled offsets in [first, end), sorted (any int
# sequence; numpy int64 preferred). The cancel feature answers it from its own storage.
Cancelled = Callable[[int, int], Sequence[int]]

NO_HORIZON = -(1 << 63)  # retention_ms = -1: nothing becomes removable by age
NO_OFFSETS = np.empty(0, dtype=np.int64)


def horizon(now: int, retention_ms: int) -> int:
    """Batches with deliverAfter below this are removable by age."""
    return NO_HORIZON if retention_ms < 0 else now - retention_ms


def cancelled_between(cancelled: Cancelled | None, first: int, end: int) -> np.ndarray:
    """The `cancelled` hook's answer for [first, end) as sorted unique int64 (empty for no
    hook)."""
    if cancelled is None:
        return NO_OFFSETS
    return np.unique(np.asarray(cancelled(first, end), dtype=np.int64))


class Removable(NamedTuple):
    drop: np.ndarray        # bool per batch: every record of it is removable
    cancelled: np.ndarray   # int64 per batch: how many of its records are cancelled
    removable_bytes: float  # a partly cancelled batch counts its cancelled share


def removable(deliver_after: np.ndarray, first: np.ndarray, count: np.ndarray,
              size: np.ndarray, horizon_ms: int, gone: np.ndarray) -> Removable:
    """What of each batch (deliverAfter, first offset, record count, bytes; int64 columns
    in any order) is removable at `horizon_ms` with the cancelled offsets `gone` (sorted,
    each once). O(batches) numpy work."""
    drop = deliver_after < horizon_ms
    n = cancelled_per_batch(gone, first, count).cancelled
    keep = ~drop
    whole = keep & (n >= count)
    part = keep & ~whole & (n > 0)
    drop |= whole
    share = float(size[drop].sum()) + float((size[part] * n[part] / count[part]).sum())
    return Removable(drop, n, share)
