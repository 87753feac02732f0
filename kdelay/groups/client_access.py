"""ClientAccess: one open Log's group side. What the clients (Consumer, QueueConsumer,
Topic; a broker's groups alike) use of an open Log beyond its public methods, by name: the
open check, consumer-group membership, the queue groups it holds, and when anything comes
due next; and what the Log's own `commit`, `commit_many` and `metrics` delegate to: group
positions and the metrics that join the log's counts (fetch/metrics.py) with each group's
lag and each queue group's counts.

A Log hands one out as `log.clients`; nothing here is a user's surface."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..fetch import metrics
from ..records import DeliveryKey
from ..validation import commit_key
from .positions import GroupStore, committed_positions
from .queue.queue_groups import AppendListener, QueueGroups

if TYPE_CHECKING:
    from ..log.cancellation.cancel_store import CancelStore
    from ..log.segments.segment_set import SegmentSet
    from ..log.tiered.tier import RemoteTier


class ClientAccess:
    """One open Log's plumbing for its clients (see the module docstring)."""

    def __init__(self, path: str, check_open: Callable[[], None], lock: threading.RLock,
                 segments: SegmentSet, cancels: CancelStore, now: Callable[[], int],
                 add_append_listener: Callable[[AppendListener], None]):
        self.check_open = check_open  # LogClosedError once closed (ForkedProcessError too)
        self.positions = GroupStore(path)  # consumer groups' committed positions
        # the live queue groups: attach, detach, counts
        self.queue_groups = QueueGroups(path, add_append_listener)
        self._lock = lock
        self._segments = segments
        self._cancels = cancels
        self._now = now  # the log clock

    def join_group(self, group: str) -> int:
        """Register a new member (Consumer) of `group` and return its generation; every
        older member is fenced (see `check_member`). One small file write."""
        self.check_open()
        return self.positions.join(group)

    def check_member(self, group: str, generation: int) -> None:
        """Raise GroupFencedError if a member newer than `generation` joined `group`.
        O(1), from memory."""
        self.positions.check_member(group, generation)

    def has_position(self, group: str) -> bool:
        """Whether `group` has a stored position on this log (a dict lookup)."""
        return self.positions.has_position(group)

    def close(self) -> None:
        """The Log's close: its queue groups (none writes after this), then the commit
        journal's descriptor (nothing to write). Call without the log's lock: a poll holds
        its group's lock while it reads the log."""
        self.queue_groups.close()
        self.positions.close()

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

    def commit(self, group: str, key: object, generation: int | None) -> None:
        """Log.commit: store `group`'s position durably, refused with GroupFencedError once
        a member newer than `generation` joined. One journal append and fdatasync
        (groups/positions.py)."""
        key = commit_key(key)
        self.check_open()
        self.positions.commit(group, key, self._now(), generation)

    def delete_group(self, group: str) -> bool:
        """Forget `group`'s position on this log (a broker's DeleteGroups); False if it had
        none. As one commit: one journal append and fdatasync."""
        self.check_open()
        return self.positions.delete(group, self._now())

    def committed(self, group: str) -> DeliveryKey | None:
        """Log.committed: `group`'s stored position (None: none). A dict lookup."""
        self.check_open()
        return self.positions.committed(group)

    def commit_many(self, positions: dict[str, DeliveryKey | None]) -> None:
        """Log.commit_many: several groups' positions, one journal append and one
        fdatasync for them all."""
        keys = {group: commit_key(key) for group, key in positions.items()}
        self.check_open()
        self.positions.commit_many(keys, self._now())

    def metrics(self, compaction_totals: dict, tier: RemoteTier | None) -> dict:
        """Log.metrics: the log's counts with each consumer group's committed key and lag,
        each queue group's counts, and with a `tier` the object store's. O(segments +
        batches due)."""
        self.check_open()
        reach = metrics.Reach()  # a store that is down is reported, never raised
        with self._lock:
            now = self._now()
            keys, unreadable = committed_positions(self.positions)
            out = metrics.log_metrics(self._segments, keys, unreadable, self._cancels,
                                      compaction_totals, now, reach)
        # outside the lock, as a live queue group's counts take the group's lock
        out["queues"] = self.queue_groups.counts(
            now, lambda key: self.due_after([key], now, reach)[0])
        if tier is not None:
            with self._lock:
                out["remote"] = metrics.remote_metrics(self._segments, tier, reach)
        return out
