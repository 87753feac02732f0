"""BatchReads: what the broker reads of an open Log at the grain of stored batches, by
name: due batches after a cursor (due_batches.py; the broker's due-order view numbers
them) and stored batches in offset order from an offset (offset_order.batches_from; a
plain topic's fetch and a share fetch serve them). No record is decoded.

A Log hands one out as `log.batches`; nothing here is a user's surface."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..records import DeliveryKey
from . import offset_order
from .due_batches import DueBatch, DueBatchReader

if TYPE_CHECKING:
    from ..log.cancellation.cancel_store import CancelStore
    from ..log.segments.segment_set import SegmentSet


class BatchReads:
    """One open Log's batch-grained reads (see the module docstring). `check_open` raises
    LogClosedError once the log is closed; `now` is the log clock."""

    def __init__(self, check_open: Callable[[], None], lock: threading.RLock,
                 segments: SegmentSet, cancels: CancelStore, now: Callable[[], int]):
        self._check_open = check_open
        self._lock = lock
        self._segments = segments
        self._cancels = cancels
        self._now = now
        self._due = DueBatchReader()

    def due(self, after: DeliveryKey | None, *, max_batches: int, max_bytes: int,
            with_bytes: bool) -> tuple[list[DueBatch], DeliveryKey | None, int]:
        """(batches, next, now): stored batches due at the log clock `now` after `after`,
        whole, in key order (DueBatchReader.read). Cost: per batch one heap step, plus
        with bytes one copy and one CRC-32C pass; O(sealed segments overlapping `after`)
        to start."""
        with self._lock:
            self._check_open()
            now = self._now()
            return (*self._due.read(self._segments, after, now, max_batches, max_bytes,
                                    self._cancels, with_bytes), now)

    def from_offset(self, offset: int, max_bytes: int) -> list[bytes]:
        """Stored batches in offset order from the one holding `offset`, checked, while
        their sizes keep within `max_bytes` (at least one). Cost: one offset-index search,
        then the batches read."""
        with self._lock:
            self._check_open()
            return offset_order.batches_from(self._segments, offset, max_bytes)
