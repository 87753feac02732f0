"""ClientAccess: what the clients (Consumer, QueueConsumer, Topic; a broker's groups alike)
use of an open Log beyond its public methods, by name: the open check, consumer-group
membership, the queue groups it holds, and when anything comes due next.

A Log hands one out as `log.clients`; nothing here is a user's surface."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..fetch import metrics
from ..records import DeliveryKey
from .positions import GroupStore
from .queue.queue_groups import QueueGroups

if TYPE_CHECKING:
    from ..log.cancellation.cancel_store import CancelStore
    from ..log.segments.segment_set import SegmentSet


class ClientAccess:
    """One open Log's plumbing for its clients (see the module docstring)."""

    def __init__(self, check_open: Callable[[], None], lock: threading.RLock,
                 segments: SegmentSet, cancels: CancelStore, groups: GroupStore,
                 queue_groups: QueueGroups):
        self.check_open = check_open  # LogClosedError once closed (ForkedProcessError too)
        self.queue_groups = queue_groups  # the live queue groups: attach, detach, counts
        self._lock = lock
        self._segments = segments
        self._cancels = cancels
        self._groups = groups

    def join_group(self, group: str) -> int:
        """Register a new member (Consumer) of `group` and return its generation; every
        older member is fenced (see `check_member`). One small file write."""
        self.check_open()
        return self._groups.join(group)

    def check_member(self, group: str, generation: int) -> None:
        """Raise GroupFencedError if a member newer than `generation` joined `group`.
        O(1), from memory."""
        self._groups.check_member(group, generation)

    def has_position(self, group: str) -> bool:
        """Whether `group` has ever stored a position on this log. One stat."""
        return os.path.exists(self._groups.path(group))

    def earliest_pending(self, now: int) -> int | None:
        """The smallest deliverAfter > `now` in the log (None: nothing pending). Sealed
        segments whose largest key is due are skipped without being touched: O(segments
        not all due)."""
        with self._lock:
            return metrics.earliest_pending(self._segments, now)

    def due_after(self, keys: Sequence[DeliveryKey | None], now: int,
                  reach: metrics.Reach | None = None) -> list[int]:
        """Per key (a position in due order, None: the start), the records due at `now`
        after it and not cancelled: what a reader at that position has left to read now
        (over the segments in `reach`: all when None). O(segments + batches due)."""
        with self._lock:
            return metrics.due_after_keys(self._segments, keys, now, self._cancels, reach)
