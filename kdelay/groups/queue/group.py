"""A queue group's shared state on one open Log (see `consumer` for the consumer side).

One `GroupPartition` per (open Log, group) holds the group's state on that partition and
is shared by every QueueConsumer of the group on that Log (threads of one process):

- `cursor`: the DeliveryKey up to which the log's due order has been acquired at least
  once; new records come from `log.fetch(cursor)` (so cancelled records never appear);
- `inflight`: offset -> _Entry (delivery count, available-at time, holder, lock expiry);
- a heap of available entries keyed by (available-at, offset) and a heap of locks keyed by
  expiry, both with lazy deletion (an item is live while its version matches the entry's),
  so a poll costs O(page * log n) whatever the size of the in-flight set.

A poll merges the heap's due head with the next page of the log in (time, offset) order.
Durability (the journal and snapshot) is kdelay.groups.queue.state_store's; see there
for what a crash keeps. The Log holds the state of each of its open groups (its
QueueGroups: `attach`, `detach`) and wakes them on every append. The group knows its
consumers only as `Member`s: what it needs of each, passed in.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ...errors import KdelayError, LogClosedError
from ...fetch.long_poll import ActivitySignal
from ...read_ranges import coalesce
from ...records import DeliveryKey, FetchedRecord, Header
from . import state_store
from .state_store import (
    ACK,
    ACQUIRE,
    ACQUIRED_BIT,
    DROP,
    REJECT,
    RELEASE,
    StateStore,
)

if TYPE_CHECKING:
    from ...records import FetchResult
    from ..client_access import ClientAccess

# why a record went to a dead letter (the `kdelay.dlq.reason` header; kdelay.clients.dead_letter)
REJECTED = "rejected"
MAX_DELIVERY_COUNT = "max_delivery_count"


class Log(Protocol):
    """What a queue group uses of the open Log it lives on (kdelay.partition.Log)."""

    path: str
    clients: ClientAccess  # the open check, the queue groups it holds

    @property
    def log_end_offset(self) -> int: ...
    def now(self) -> int: ...
    def fetch(self, after: DeliveryKey | int | None = None, *,
              max_records: int = ...) -> FetchResult: ...
    def read(self, offset: int, *, max_records: int = ...) -> list[FetchedRecord]: ...

__all__ = ["GroupPartition", "Member", "QueueRecord", "attach", "detach"]


class QueueRecord(NamedTuple):
    """A record acquired by a QueueConsumer: FetchedRecord's fields plus `delivery_count`
    (1 on the first delivery to the group, +1 on each later one)."""

    offset: int
    deliver_after: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    partition: int | None = None
    delivery_count: int = 1

    @property
    def delivery_key(self) -> DeliveryKey:
        return DeliveryKey(self.deliver_after, self.offset)


@dataclass(frozen=True, eq=False)
class Member:
    """What a queue group needs of one consumer: how long its locks last, the delivery
    count past which a record is rejected instead, and `dead_letter(records, reason)`
    (QueueRecords with the deliveries they had), called before such a reject is
    journaled. Its identity marks the records it holds."""

    lock_ms: int
    max_delivery_count: int
    dead_letter: Callable[[list, str], None]


class _Entry:
    """One in-flight record. `holder` is the Member holding it (None: available at
    `avail_at`); `version` changes on every state change (lazy heap deletion)."""

    __slots__ = ("count", "avail_at", "holder", "lock_until", "version")

    def __init__(self, count: int, avail_at: int, version: int):
        self.count = count
        self.avail_at = avail_at
        self.holder: Member | None = None
        self.lock_until = 0
        self.version = version


_READ_SPAN = 256  # redeliveries closer than this share one read


class GroupPartition:
    """A queue group's state on one Log, shared by its QueueConsumers; every method that
    touches the state runs under `lock`."""

    def __init__(self, log: Log, group: str, compact_min_bytes: int):
        self.log = log
        self.group = group
        self.lock = threading.Lock()
        self.store = StateStore(log.path, group, compact_min_bytes=compact_min_bytes)
        gc_was_on = gc.isenabled()
        gc.disable()  # building O(in flight) objects at once: collections would rescan them
        try:
            st = self.store.open()
            try:
                self._load(st)
            except BaseException:
                self.store.close()
                raise
        finally:
            if gc_was_on:
                gc.enable()
        self.closed = False
        # a share group's delayed release also for locks that run out (kdelay.broker)
        self.expiry_delay: Callable[[int], int] | None = None
        self._subscribers: set[ActivitySignal] = set()
        self._sub_lock = threading.Lock()

    def _load(self, st: state_store.LoadedState) -> None:
        self.cursor = st.cursor
        self.acked, self.rejected, self.dropped = st.acked, st.rejected, 0
        self._ver = itertools.count(1)
        # version 0 for all: versions only have to change when an entry does
        items = st.inflight.items()
        self.inflight: dict[int, _Entry] = {off: _Entry(count, at, 0)
                                             for off, (count, at) in items}
        self._avail: list[tuple[int, int, int]] = [(at, off, 0) for off, (_, at) in items]
        heapq.heapify(self._avail)
        self._locks: list[tuple[int, int, int]] = []
        self._forget_lost_tail(st)

    def _forget_lost_tail(self, st) -> None:
        """The log can lose an unflushed tail in a power loss (flush_messages=None) that
        the group, fsync'd, had already seen: forget those offsets (new appends will reuse
        them) and pull the cursor back below the log end, durably, before anything else."""
        end = self.log.log_end_offset
        lost = sorted(o for o in self.inflight if o >= end)
        cursor = self.cursor
        if not lost and (cursor is None or cursor.offset < end):
            return
        if cursor is not None and cursor.offset >= end:
            cursor = DeliveryKey(cursor.deliver_after, end - 1)
        self.store.append([(DROP, state_store.offsets_payload(lost)),
                           (ACQUIRE, state_store.acquire_payload(cursor, []))], sync=True)
        for o in lost:
            del self.inflight[o]
        self.cursor = cursor

    # ------------------------------------------------------------------ wake-ups

    def subscribe(self, signal: ActivitySignal) -> None:
        with self._sub_lock:
            self._subscribers.add(signal)

    def unsubscribe(self, signal: ActivitySignal) -> None:
        with self._sub_lock:
            self._subscribers.discard(signal)

    def notify(self, due_in: int = 0) -> None:
        """Tell the members' signals that records become available in `due_in` ms (0:
        now; ActivitySignal.comes_due)."""
        with self._sub_lock:
            subs = list(self._subscribers)
        for s in subs:
            s.comes_due(due_in)

    # ------------------------------------------------------------------ heaps

    def _expire(self, now: int) -> None:
        """Locks that ran out (the log clock passed their expiry) make records available
        (after `expiry_delay(delivery count)` ms when the group has a release delay: a lock
        that runs out counts as a release)."""
        locks, inflight = self._locks, self.inflight
        while locks and locks[0][0] < now:
            until, off, ver = heapq.heappop(locks)
            e = inflight.get(off)
            if e is not None and e.version == ver and e.holder is not None:
                e.holder = None
                if self.expiry_delay is not None:
                    e.avail_at = max(e.avail_at, until + self.expiry_delay(e.count))
                e.version = next(self._ver)
                heapq.heappush(self._avail, (e.avail_at, off, e.version))

    def _live_avail_head(self) -> tuple[int, int, int] | None:
        avail, inflight = self._avail, self.inflight
        while avail:
            at, off, ver = avail[0]
            e = inflight.get(off)
            if e is not None and e.version == ver and e.holder is None:
                return avail[0]
            heapq.heappop(avail)
        return None

    def next_event(self, now: int) -> int | None:
        """The earliest log-clock time after `now` at which a delayed release comes due or
        a lock runs out (None: none)."""
        with self.lock:
            best = None
            head = self._live_avail_head()
            if head is not None:
                best = head[0]
            locks = self._locks
            while locks:
                until, off, ver = locks[0]
                e = self.inflight.get(off)
                if e is not None and e.version == ver and e.holder is not None:
                    best = until + 1 if best is None else min(best, until + 1)
                    break
                heapq.heappop(locks)
            return best

    # ------------------------------------------------------------------ acquire

    def poll(self, member: Member, budget: int, partition: int | None
             ) -> list[QueueRecord]:
        """Acquire up to `budget` due records for `member`: O(budget * log n) plus one
        page."""
        with self.lock:
            self.check_open()
            now = self.log.now()
            self._expire(now)
            page = self.log.fetch(self.cursor, max_records=budget).records
            picked: list[tuple[int, int, FetchedRecord | None]] = []
            popped = []
            i = 0
            head = self._live_avail_head()
            while len(picked) < budget:
                if head is not None and head[0] > now:
                    head = None
                if head is None:  # the rest comes from the page, in one slice
                    take = page[i:i + budget - len(picked)]
                    picked += [(r.offset, r.deliver_after, r) for r in take]
                    i += len(take)
                    break
                rec = page[i] if i < len(page) else None
                if rec is None or (head[0], head[1]) < (rec.deliver_after, rec.offset):
                    popped.append(heapq.heappop(self._avail))
                    picked.append((head[1], head[0], None))
                    head = self._live_avail_head()
                else:
                    picked.append((rec.offset, rec.deliver_after, rec))
                    i += 1
            if not picked:
                return []
            try:
                return self._acquire(member, picked,
                                     page[i - 1].delivery_key if i else None, now, partition)
            except BaseException:
                for item in popped:  # nothing was applied: offer them again
                    heapq.heappush(self._avail, item)
                raise

    def _acquire(self, member: Member, picked: list, new_cursor: DeliveryKey | None,
                 now: int, partition: int | None) -> list[QueueRecord]:
        inflight = self.inflight
        items: list[tuple[int, int, int]] = []        # (offset, count, avail_at)
        taken: list[tuple[int, int, FetchedRecord]] = []
        rejects: list[tuple[int, QueueRecord]] = []
        dropped: list[int] = []
        contents = self._read_many(sorted(off for off, _, rec in picked if rec is None))
        for off, at, rec in picked:
            e = inflight.get(off)
            if rec is None:
                rec = contents.get(off)
                if rec is None:  # removed by retention while in flight
                    dropped.append(off)
                    continue
            count = 1 if e is None else e.count + 1
            if count > member.max_delivery_count:  # delivered count - 1 times already
                rejects.append((off, QueueRecord(rec.offset, rec.deliver_after, rec.timestamp,
                                                 rec.key, rec.value, rec.headers, partition,
                                                 count - 1)))
                continue
            items.append((off, count, at))
            taken.append((off, count, rec))
        if rejects:
            member.dead_letter([rec for _, rec in rejects], MAX_DELIVERY_COUNT)
        entries = []
        if items or new_cursor is not None:
            entries.append((ACQUIRE, state_store.acquire_payload(new_cursor or self.cursor,
                                                                 items)))
        if rejects:
            entries.append((REJECT, state_store.offsets_payload([o for o, _ in rejects])))
        if dropped:
            entries.append((DROP, state_store.offsets_payload(dropped)))
        if entries:
            # acquisitions are not fsync'd (see state_store); a reject is, before it counts
            self.store.append(entries, sync=bool(rejects))
        # applied only once written
        if new_cursor is not None:
            self.cursor = new_cursor
        lock_until = now + member.lock_ms
        out = []
        ver = self._ver
        for (off, count, at), (_, _, rec) in zip(items, taken, strict=True):
            e = inflight.get(off)
            if e is None:
                e = inflight[off] = _Entry(count, at, 0)
            e.count, e.avail_at, e.holder, e.lock_until = count, at, member, lock_until
            e.version = next(ver)
            heapq.heappush(self._locks, (lock_until, off, e.version))
            out.append(QueueRecord(rec.offset, rec.deliver_after, rec.timestamp, rec.key,
                                   rec.value, rec.headers, partition, count))
        for off, _ in rejects:
            del inflight[off]
        self.rejected += len(rejects)
        for off in dropped:
            del inflight[off]
        self.dropped += len(dropped)
        self._maybe_compact()
        return out

    def _read_many(self, offsets: list[int]) -> dict[int, FetchedRecord]:
        """The records at sorted `offsets`, read in runs of nearby offsets (one read per
        run, not per record: a read decodes whole batches)."""
        out: dict[int, FetchedRecord] = {}
        for i, j in coalesce(offsets, [o + 1 for o in offsets], max_span=_READ_SPAN):
            wanted = set(offsets[i:j])
            for rec in self.log.read(offsets[i], max_records=offsets[j - 1] - offsets[i] + 1):
                if rec.offset in wanted:
                    out[rec.offset] = rec
        return out

    # ------------------------------------------------------------------ finish

    def check_held(self, member: Member, items: list[tuple[int, int]], now: int) -> None:
        """Raise KdelayError unless `member` holds every (offset, delivery count) with a
        lock that has not run out. Changes nothing."""
        for off, count in items:
            e = self.inflight.get(off)
            if e is None or e.holder is not member or e.count != count:
                raise KdelayError(f"record at offset {off} (delivery {count}) is not held "
                                  f"by this consumer of queue group {self.group!r}")
            if e.lock_until < now:
                raise KdelayError(f"the lock on offset {off} ran out at {e.lock_until} "
                                  f"(log clock now {now})")

    def finish(self, kind: int, offsets: list[int], avail_at: int | None) -> int:
        """Ack/reject (remove) or release (make available at `avail_at`): one journal
        write, then the change in memory. Returns the sequence number the caller must
        `store.sync_to` (after letting go of the lock, so that concurrent calls share an
        fsync) before it returns: until then the call has not happened, and a crash may
        undo it, which is all a caller that has not returned can tell."""
        if kind == RELEASE:
            if avail_at is None:
                raise ValueError("a release needs the time it makes the offsets available")
            at: int = avail_at
            payload = state_store.release_payload([(o, at) for o in offsets])
        else:
            payload = state_store.offsets_payload(offsets)
        lsn = self.store.append([(kind, payload)], sync=False)
        inflight = self.inflight
        if kind == RELEASE:
            for off in offsets:
                e = inflight[off]
                e.holder, e.avail_at, e.version = None, at, next(self._ver)
                heapq.heappush(self._avail, (at, off, e.version))
        else:
            for off in offsets:
                del inflight[off]
            if kind == ACK:
                self.acked += len(offsets)
            else:
                self.rejected += len(offsets)
        self._maybe_compact()
        return lsn

    def start_at(self, key: DeliveryKey | None) -> bool:
        """Start a group that has acquired nothing yet after `key` (a share group's
        `latest`: the records due later, those pending included). Durable on return;
        False, changing nothing, when the group has state already."""
        with self.lock:
            self.check_open()
            if self.cursor is not None or self.inflight or self.acked or self.rejected \
                    or key is None:
                return False
            self.store.append([(ACQUIRE, state_store.acquire_payload(key, []))], sync=True)
            self.cursor = key
            return True

    def renew(self, offsets: list[int], until: int) -> None:
        for off in offsets:
            e = self.inflight[off]
            e.lock_until, e.version = until, next(self._ver)
            heapq.heappush(self._locks, (until, off, e.version))

    def release_all(self, member: Member) -> int:
        """Make every record `member` holds available again at its place (close):
        O(in-flight).
        The journal notes it without an fsync: it only keeps `kdelay stats` from showing
        them as held (after a restart they are available anyway). Once the state is
        closed (its Log was), nothing: the files are the next owner's."""
        if self.closed:
            return 0
        items = []
        for off, e in self.inflight.items():
            if e.holder is member:
                e.holder, e.version = None, next(self._ver)
                heapq.heappush(self._avail, (e.avail_at, off, e.version))
                items.append((off, e.avail_at))
        if items and not self.store.failed:
            with contextlib.suppress(KdelayError):  # best effort: closing must not fail
                self.store.append([(RELEASE, state_store.release_payload(items))],
                                  sync=False)
        return len(items)

    def _maybe_compact(self) -> None:
        if self.store.should_compact(len(self.inflight)):
            self.store.compact(self.cursor, self.acked, self.rejected,
                               [(o, e.count | (0 if e.holder is None else ACQUIRED_BIT),
                                 e.avail_at) for o, e in self.inflight.items()])

    def check_open(self) -> None:
        """KdelayError once the state is closed (LogClosedError: its Log was closed, or
        this is a forked child) or its journal failed."""
        if self.closed:
            self.log.clients.check_open()  # says why when the Log was closed
            raise LogClosedError(f"queue group {self.group!r} on {self.log.path} is closed")
        self.store.check_failed()

    def close(self) -> None:
        """By the Log's QueueGroups, once the last member has left."""
        with self.lock:
            self.closed = True
            self.store.close()

    # ------------------------------------------------------------------ metrics

    def counts(self, now: int) -> dict:
        with self.lock:
            self._expire(now)
            acquired = available = delayed = 0
            for e in self.inflight.values():
                if e.holder is not None:
                    acquired += 1
                elif e.avail_at <= now:
                    available += 1
                else:
                    delayed += 1
            return {"acquired": acquired, "available": available, "delayed": delayed,
                    "acked": self.acked, "rejected": self.rejected,
                    "in_flight": len(self.inflight), "cursor": self.cursor}


def attach(log: Log, group: str, compact_min_bytes: int) -> GroupPartition:
    """The state of `group` on `log` for one more member (opened for the first)."""
    def open_state() -> GroupPartition:
        log.clients.check_open()  # a Log that closed since the member checked it
        return GroupPartition(log, group, compact_min_bytes)

    return log.clients.queue_groups.attach(group, open_state)


def detach(part: GroupPartition) -> None:
    """One member fewer; the last one closes the state."""
    part.log.clients.queue_groups.detach(part.group, part)
