"""QueueConsumer: work-queue consumption of a delayed topic (Kafka share groups, KIP-932,
with a delay on release).

Every member of a queue group acquires records one by one: a due record is held by at most
one QueueConsumer at a time, under a lock of `lock_ms` on the log clock, until it is acked
(done), released (offered again, optionally after a delay, with no copy appended to the
log), rejected (done, dead-lettered if configured), or its lock runs out (offered again).
Each delivery counts; the delivery after `max_delivery_count` is rejected instead.

The group's shared state on each Log is `group.GroupPartition`, held by the Log; its files
are kdelay.groups.queue's. Long polls (fetch.long_poll) sleep on the consumer's
signal, told of appends (the group's, by the Log) and releases, and bumped by closes: an
append or a release wakes them only if due before they would wake anyway, which is when
the earliest delayed release, lock expiry or pending record comes due on the log clock.

Once its Log is closed (which closes the group's state there), every call but close is
refused with LogClosedError and nothing is written; in a forked child, every call is
refused with ForkedProcessError (kdelay.forks).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable

from ... import forks
from ...errors import KdelayError
from ...fetch.long_poll import ActivitySignal, long_poll
from ...groups.queue import state_store
from ...groups.queue.group import GroupPartition, Member, QueueRecord, attach, detach
from ...groups.queue.state_store import ACK, REJECT, RELEASE
from ...partition import Log
from ...records import DeliveryKey
from ...validation import as_int, check_page_limits, is_int, time_after
from ..dead_letter import REJECTED, dead_letter_copy, send_to_dead_letter
from ..topic import Topic, fair_round

__all__ = ["QueueConsumer", "QueueRecord"]


class QueueConsumer(forks.Owned):
    """`QueueConsumer(log_or_topic, group, *, lock_ms=30_000, max_delivery_count=5,
    dead_letter=None)`: one member of a queue group (see the module docstring).

    `start="latest"` makes a group that has acquired nothing yet start after the records
    due now (Kafka's share.auto.offset.reset=latest; the default "earliest" takes every
    retained record). `expired_lock_delay(delivery_count) -> ms` delays a record whose lock
    ran out as a release with that delay would (the broker's delayed release).

    Thread-safe to share, but meant as one per worker thread; many QueueConsumers of one
    group share the group's state on each open Log."""

    def __init__(self, source: Log | Topic, group: str, *, lock_ms: int = 30_000,
                 max_delivery_count: int = 5, dead_letter: Log | Topic | None = None,
                 compact_min_bytes: int = 1 << 20, start: str = "earliest",
                 expired_lock_delay: Callable[[int], int] | None = None):
        if isinstance(source, Topic):
            logs, self._is_topic = source.logs, True
        elif isinstance(source, Log):
            logs, self._is_topic = [source], False
        else:
            raise KdelayError(f"QueueConsumer needs a Log or a Topic, "
                              f"got {type(source).__name__}")
        state_store.validate_group(group)
        lock_ms = as_int(lock_ms, "lock_ms", lo=1)  # 0: every record free again at once
        for log in logs:
            log.clients.check_open()  # before taking the group's locks (see kdelay.forks)
            time_after(log.now(), lock_ms, "lock_ms")
        max_delivery_count = as_int(max_delivery_count, "max_delivery_count", lo=1)
        if dead_letter is not None and not isinstance(dead_letter, (Log, Topic)):
            raise KdelayError(f"dead_letter must be a Log or a Topic, "
                              f"got {type(dead_letter).__name__}")
        compact_min_bytes = as_int(compact_min_bytes, "compact_min_bytes")
        if start not in ("earliest", "latest"):
            raise KdelayError(f"start must be 'earliest' or 'latest', got {start!r}")
        self.source, self.group = source, group
        self.lock_ms, self.max_delivery_count = lock_ms, max_delivery_count
        self.dead_letter = dead_letter
        self._member = Member(lock_ms, max_delivery_count,
                              functools.partial(_copy_to_dead_letter, dead_letter,
                                                source.name if isinstance(source, Topic)
                                                else None))
        self._signal = ActivitySignal()
        self._parts: list[GroupPartition] = []
        try:
            for log in logs:
                part = attach(log, group, compact_min_bytes)
                self._parts.append(part)
                if expired_lock_delay is not None:
                    part.expiry_delay = expired_lock_delay
                if start == "latest" and log.log_end_offset:
                    # a group that has acquired nothing yet starts after what is due now
                    part.start_at(DeliveryKey(log.now(), log.log_end_offset - 1))
                part.subscribe(self._signal)
        except BaseException:
            for part in self._parts:
                part.unsubscribe(self._signal)
                detach(part)
            raise
        self._start = 0
        self._closed = False
        self._owner = forks.Ownership(self, f"QueueConsumer of queue group {group!r}")

    # ------------------------------------------------------------------ poll

    def poll(self, max_records: int = 500, timeout_ms: int = 0) -> list[QueueRecord]:
        """Acquire up to `max_records` due records, in (time, offset) order per partition.
        With `timeout_ms` > 0 and nothing to acquire, waits (asleep) until an append, a
        release, a lock expiry or a delayed record makes one available, or time is up."""
        max_records, _, timeout_ms = check_page_limits(max_records, 1, timeout_ms)

        def poll_once() -> tuple[list[QueueRecord], bool]:
            self._check_open()  # also after a sleep: close() wakes it
            out = self._poll_round(max_records)
            return out, bool(out)

        return long_poll(poll_once, self._next_due_ms, self._signal,
                         time.monotonic() + timeout_ms / 1000)

    def _next_due_ms(self) -> int | None:
        """How long until a delayed release comes due, a lock runs out or a pending record
        comes due, on any partition (ms on the log clock; None: none will)."""
        wait = None
        for part in self._parts:
            now = part.log.now()
            for t in (part.next_event(now), part.log.clients.earliest_pending(now)):
                if t is not None and (wait is None or t - now < wait):
                    wait = t - now
        return wait

    def _poll_round(self, max_records: int) -> list[QueueRecord]:
        n = len(self._parts)
        if n == 1:  # a Log's records carry no partition; a Topic's theirs, as Consumer's do
            return self._parts[0].poll(self._member, max_records, 0 if self._is_topic else None)
        order = [(self._start + k) % n for k in range(n)]
        self._start = (self._start + 1) % n
        return fair_round(order, max_records,
                          lambda i, take: self._parts[i].poll(self._member, take, i))

    # ------------------------------------------------------------------ ack / release

    def ack(self, records: QueueRecord | Iterable[QueueRecord]) -> None:
        """Done: never delivered to this group again. Durable when it returns."""
        self._finish(records, ACK)

    def reject(self, records: QueueRecord | Iterable[QueueRecord]) -> None:
        """Never delivered again; appended to `dead_letter` (if set) first. Durable."""
        self._finish(records, REJECT)

    def release(self, records: QueueRecord | Iterable[QueueRecord], delay_ms: int = 0
                ) -> None:
        """Offer again to the group, no earlier than now + `delay_ms` on the log clock (the
        record keeps its offset; nothing is appended). Durable when it returns."""
        self._finish(records, RELEASE, as_int(delay_ms, "delay_ms"))

    def renew(self, records: QueueRecord | Iterable[QueueRecord]) -> None:
        """Extend the locks of held records to `lock_ms` from now (not persisted: a lock
        does not outlive the process)."""
        self._finish(records, None)

    def _finish(self, records: QueueRecord | Iterable[QueueRecord], kind: int | None,
                delay_ms: int = 0) -> None:
        self._check_open()
        by_part = self._by_partition(records)
        parts = sorted(by_part)
        locks = [self._parts[i].lock for i in parts]
        for lk in locks:
            lk.acquire()
        try:
            untils = {}  # the new lock expiry (renew) or available-at time, checked
            for i in parts:
                part = self._parts[i]
                part.check_open()
                now = part.log.now()
                part.check_held(self._member, [(o, c) for o, c, _ in by_part[i]], now)
                untils[i] = (time_after(now, self.lock_ms, "lock_ms") if kind is None
                             else time_after(now, delay_ms, "delay_ms"))
            if kind == REJECT:
                self._member.dead_letter([r for i in parts for _, _, r in by_part[i]],
                                         REJECTED)
            pending = []
            for i in parts:
                offsets = [o for o, _, _ in by_part[i]]
                if kind is None:
                    self._parts[i].renew(offsets, untils[i])
                else:
                    lsn = self._parts[i].finish(kind, offsets, untils[i])
                    pending.append((self._parts[i].store, lsn))
        finally:
            for lk in locks:
                lk.release()
        for store, lsn in pending:  # group commit: outside the locks
            store.sync_to(lsn)
        if kind == RELEASE:
            for i in parts:
                self._parts[i].notify(delay_ms)

    def _by_partition(self, records: QueueRecord | Iterable[QueueRecord]
                      ) -> dict[int, list]:
        """The records (one, or an iterable of them) by partition index, checked."""
        if isinstance(records, QueueRecord):
            recs = [records]
        elif isinstance(records, (bytes, bytearray, memoryview, str)):
            raise KdelayError(f"expected a record polled by a QueueConsumer or a list of "
                              f"them, got {type(records).__name__}")
        else:
            try:
                recs = list(records)
            except TypeError:
                raise KdelayError(f"records must be a QueueRecord or an iterable of them, "
                                  f"got {type(records).__name__}") from None
        by_part: dict[int, list] = {}
        seen = set()
        for r in recs:
            if not isinstance(r, QueueRecord):
                raise KdelayError(f"expected records polled by a QueueConsumer, "
                                  f"got {type(r).__name__}")
            p = r.partition
            if self._is_topic:
                if not is_int(p) or not 0 <= p < len(self._parts):
                    raise KdelayError(f"record has partition {p!r}, not one of this topic's")
                i = int(p)
            elif p is not None:
                raise KdelayError(f"record has partition {p!r} but this consumer reads a Log")
            else:
                i = 0
            if (i, r.offset) in seen:
                raise KdelayError(f"offset {r.offset} appears twice in one call")
            seen.add((i, r.offset))
            by_part.setdefault(i, []).append((r.offset, r.delivery_count, r))
        return by_part

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Leave the group: records this consumer holds are available again at once
        (after its Log was closed: nothing to do, it closed the group)."""
        if self._closed:
            self._owner.check_close_again()
            return
        self._closed = True
        for part in self._parts:
            part.unsubscribe(self._signal)
            with part.lock:
                released = part.release_all(self._member)
            if released:
                part.notify()
            detach(part)
        self._signal.bump()

    def _orphaned(self) -> None:
        """In a forked child (kdelay.forks): closed for good, touching nothing."""
        self._closed = True


def _copy_to_dead_letter(dl: Log | Topic | None, topic: str | None,
                         records: list[QueueRecord], reason: str) -> None:
    """Copy records to the dead-letter log (dead_letter.dead_letter_copy) and flush it,
    before the reject is journaled: a crash in between dead-letters a record twice at
    worst."""
    if dl is None or not records:
        return
    send_to_dead_letter(dl, [dead_letter_copy(r, delivery_count=r.delivery_count,
                                              reason=reason, topic=topic)
                             for r in records])
