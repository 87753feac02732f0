"""What a consumer reads of each partition: a delayed topic's partition through its due-order
view (delivery offsets, delivery_view.py), a plain topic's (delayed.delivery.enable=false)
by log offset, as any Kafka topic. Both answer the same questions (log start, high
watermark, batches from an offset, the offset for a time, when more may come due), so
Fetch and ListOffsets need not tell them apart.

`ServedPartitions` opens each partition's served form on first use and keeps it while the
broker serves (close: at stop, before the topics close; `forget`: a topic deleted or
reopened with new configs, told by the registry's listener where it has one).
Cost: a dict lookup per partition of a request.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..errors import OffsetOutOfRangeError
from ..records import DeliveryKey
from .delivery_view import DeliveryView
from .fetch_wait import Wakeups
from .record_parts import RecordParts

if TYPE_CHECKING:
    from ..partition import Log
    from .topics import TopicRegistry


class PlainPartition:
    """A plain topic's partition, served by log offset."""

    def __init__(self, log: Log):
        self.log = log

    def extend(self) -> int:
        return 0  # every record is due when appended

    @property
    def log_start(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    def read(self, n: int, max_bytes: int) -> RecordParts:
        """Batches from the one holding offset `n`, headers rewritten (own offsets)."""
        if not self.log_start <= n <= self.high_watermark:
            raise OffsetOutOfRangeError(f"offset {n} is outside [{self.log_start}, "
                                        f"{self.high_watermark}]")
        parts = RecordParts()
        if n < self.high_watermark:
            for data in self.log.reads.batches_from(n, max_bytes):
                parts.add_stored(data, int.from_bytes(data[:8], "big"))
        return parts

    def offset_for_time(self, t: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record whose timestamp is `t` or later
        ((-1, -1): none)."""
        found = self.log.offset_for_time(t)
        return (-1, -1) if found is None else found

    def next_due_ms(self) -> int | None:
        return None  # nothing comes due later: only appends wake a fetch

    def key_before(self, n: int) -> DeliveryKey | None:
        """The engine's group position for a consumer whose next offset is `n` (the key of
        record n - 1; None from the start). One small read."""
        if n <= 0:
            return None
        records = self.log.read(n - 1, max_records=1)
        if not records:
            raise OffsetOutOfRangeError(f"offset {n} is beyond the log end "
                                        f"{self.log.log_end_offset}")
        r = records[0]
        return DeliveryKey(r.deliver_after, r.offset) if r.offset == n - 1 else \
            DeliveryKey(r.deliver_after, n - 1)

    def offset_after(self, key: DeliveryKey | None) -> int:
        """The next offset of a consumer whose position is `key`."""
        return 0 if key is None else key.offset + 1


class DelayedPartition:
    """A delayed topic's partition, served by delivery offset."""

    def __init__(self, log: Log):
        self.log = log
        self.view = DeliveryView.open(log)

    def extend(self) -> int:
        return self.view.extend()

    @property
    def log_start(self) -> int:
        return self.view.log_start

    @property
    def high_watermark(self) -> int:
        return self.view.high_watermark

    def read(self, n: int, max_bytes: int) -> RecordParts:
        return self.view.read(n, max_bytes)

    def offset_for_time(self, t: int) -> tuple[int, int]:
        return self.view.offset_for_time(t)

    def key_before(self, n: int) -> DeliveryKey | None:
        """The engine's group position for a consumer whose next delivery offset is `n`
        (OffsetOutOfRangeError past the high watermark)."""
        if n > self.view.high_watermark:
            raise OffsetOutOfRangeError(f"delivery offset {n} is beyond the high watermark "
                                        f"{self.view.high_watermark}")
        return None if n <= 0 else self.view.key_before(n)

    def offset_after(self, key: DeliveryKey | None) -> int:
        """The next delivery offset of a consumer whose position is `key` (numbering what
        is due first, so that an in-process commit maps)."""
        if key is None:
            return 0
        self.view.extend()
        return self.view.offset_after(key)

    def next_due_ms(self) -> int | None:
        """How long until the next pending record comes due on the log clock (None: none
        is pending)."""
        now = self.log.now()
        due = self.log.clients.earliest_pending(now)
        return None if due is None else due - now


class Served:
    """A partition's served form and the fetches waiting on it."""

    def __init__(self, log: Log, loop: asyncio.AbstractEventLoop):
        self.partition = (DelayedPartition(log) if log.config.delayed_delivery_enable
                          else PlainPartition(log))
        self.wakeups = Wakeups(loop)
        log.add_append_listener(self.wakeups.appended)


class ServedPartitions:
    """(topic, partition) -> Served, opened on first use."""

    def __init__(self, topics: TopicRegistry):
        self._topics = topics
        self._served: dict[tuple[str, int], Served] = {}
        add_listener = getattr(topics, "add_listener", None)
        if add_listener is not None:  # a registry that tells of deletes and reopens
            add_listener(lambda name, event: self.forget(name))

    def get(self, topic: str, partition: int) -> Served | None:
        """The partition's served form (None: no such topic or partition). Raises
        ViewDamagedError when its view's file is damaged."""
        found = self._served.get((topic, partition))
        if found is not None:
            return found
        t = self._topics.get(topic)
        if t is None or not 0 <= partition < t.partitions:
            return None
        found = Served(t.partition(partition), asyncio.get_running_loop())
        self._served[(topic, partition)] = found
        return found

    def before_retention(self, topic: str | None = None, partition: int | None = None
                         ) -> None:
        """Number what is due in the open views (of one topic or partition, else all) and
        fsync them: the broker's retention, compaction and tiered passes call this first
        (from any thread: a view has its lock), so that no record they remove can lose its
        delivery offset to a power failure (numbering again after a crash is identical
        only while every record it numbers is still there)."""
        for (name, p), s in list(self._served.items()):
            if (topic is None or name == topic) and (partition is None or p == partition) \
                    and isinstance(s.partition, DelayedPartition):
                s.partition.view.extend()
                s.partition.view.sync()

    def forget(self, topic: str) -> None:
        """Drop a topic's served partitions (deleted, or reopened: they open again on
        next use, over the new logs). Every view is closed (a view never synced is synced
        first); the first error, if any, is raised after."""
        errors = []
        for key in [k for k in self._served if k[0] == topic]:
            s = self._served.pop(key)
            if isinstance(s.partition, DelayedPartition):
                try:
                    s.partition.view.close()
                except Exception as e:  # (a full disk: the next open reads it as left)
                    errors.append(e)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Number what is due, fsync and close every view (the topics close after)."""
        for s in self._served.values():
            if isinstance(s.partition, DelayedPartition):
                try:
                    s.partition.view.extend()
                    s.partition.view.sync()
                finally:
                    s.partition.view.close()
        self._served.clear()


