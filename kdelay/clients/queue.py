"""QueueConsumer: work-queue consumption of a delayed topic (Kafka share groups, KIP-932,
with a delay on release).

Every member of a queue group acquires records one by one: a due record is held by at most
one QueueConsumer at a time, under a lock of `lock_ms` on the log clock, until it is acked
(done), released (offered again, optionally after a delay, with no copy appended to the
log), rejected (done, dead-lettered if configured), or its lock runs out (offered again).
Each delivery counts; the delivery after `max_delivery_count` is rejected instead.

One `_GroupPartition` per (open Log, group) holds the group's state on that partition and
is shared by every QueueConsumer of the group on that Log (threads of one process):

- `cursor`: the DeliveryKey up to which the log's due order has been acquired at least
  once; new records come from `log.fetch(cursor)` (so cancelled records never appear);
- `inflight`: offset -> _Entry (delivery count, available-at time, holder, lock expiry);
- a heap of available entries keyed by (available-at, offset) and a heap of locks keyed by
  expiry, both with lazy deletion (an item is live while its version matches the entry's),
  so a poll costs O(page * log n) whatever the size of the in-flight set.

A poll merges the heap's due head with the next page of the log in (time, offset) order.
Durability (the journal and snapshot) is `queue_state`'s; see there for what a crash keeps.
Long polls sleep on the consumer's signal, bumped by appends (the log's append listener),
by releases and by closes; they also wake when the earliest delayed release, lock expiry
or pending record comes due on the log clock.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import threading
import time
import weakref
from collections.abc import Iterable
from typing import NamedTuple

from ..errors import KdelayError
from ..partition import METRICS_SECTIONS, Log
from ..records import DeliveryKey, FetchedRecord, Header, Record
from . import queue_state
from .queue_state import ACK, ACQUIRE, ACQUIRED_BIT, DROP, REJECT, RELEASE, StateStore
from .topic import ActivitySignal, Topic

__all__ = ["QueueConsumer", "QueueRecord", "queue_metrics"]


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


class _Entry:
    """One in-flight record. `holder` is the QueueConsumer holding it (None: available at
    `avail_at`); `version` changes on every state change (lazy heap deletion)."""

    __slots__ = ("count", "avail_at", "holder", "lock_until", "version")

    def __init__(self, count: int, avail_at: int, version: int):
        self.count = count
        self.avail_at = avail_at
        self.holder: QueueConsumer | None = None
        self.lock_until = 0
        self.version = version


_READ_SPAN = 256  # redeliveries closer than this share one read
_REGISTRY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Log -> {group: part}
_REGISTRY_LOCK = threading.Lock()


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _GroupPartition:
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
        self.refs = 0
        self.closed = False
        self._subscribers: set[ActivitySignal] = set()
        self._sub_lock = threading.Lock()

    def _load(self, st: queue_state.LoadedState) -> None:
        self.cursor = st.cursor
        self.acked, self.rejected, self.dropped = st.acked, st.rejected, 0
        self._ver = itertools.count(1)
        self.inflight: dict[int, _Entry] = {}
        self._avail: list[tuple[int, int, int]] = []
        self._locks: list[tuple[int, int, int]] = []
        # version 0 for all: versions only have to change when an entry does
        items = st.inflight.items()
        self.inflight = {off: _Entry(count, at, 0) for off, (count, at) in items}
        self._avail = [(at, off, 0) for off, (_, at) in items]
        heapq.heapify(self._avail)
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
        self.store.append([(DROP, queue_state.offsets_payload(lost)),
                           (ACQUIRE, queue_state.acquire_payload(cursor, []))], sync=True)
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

    def notify(self) -> None:
        with self._sub_lock:
            subs = list(self._subscribers)
        for s in subs:
            s.bump()

    # ------------------------------------------------------------------ heaps

    def _expire(self, now: int) -> None:
        """Locks that ran out (the log clock passed their expiry) make records available."""
        locks, inflight = self._locks, self.inflight
        while locks and locks[0][0] < now:
            _, off, ver = heapq.heappop(locks)
            e = inflight.get(off)
            if e is not None and e.version == ver and e.holder is not None:
                e.holder = None
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

    def poll(self, q: QueueConsumer, budget: int, partition: int | None
             ) -> list[QueueRecord]:
        """Acquire up to `budget` due records for `q`: O(budget * log n) plus one page."""
        with self.lock:
            self._check_open()
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
                return self._acquire(q, picked, page[i - 1].delivery_key if i else None,
                                     now, partition)
            except BaseException:
                for item in popped:  # nothing was applied: offer them again
                    heapq.heappush(self._avail, item)
                raise

    def _acquire(self, q: QueueConsumer, picked: list, new_cursor: DeliveryKey | None,
                 now: int, partition: int | None) -> list[QueueRecord]:
        inflight = self.inflight
        items: list[tuple[int, int, int]] = []        # (offset, count, avail_at)
        taken: list[tuple[int, int, FetchedRecord]] = []
        rejects: list[tuple[int, FetchedRecord]] = []
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
            if count > q.max_delivery_count:
                rejects.append((off, rec))
                continue
            items.append((off, count, at))
            taken.append((off, count, rec))
        if rejects:
            q._dead_letter([rec for _, rec in rejects])
        entries = []
        if items or new_cursor is not None:
            entries.append((ACQUIRE, queue_state.acquire_payload(new_cursor or self.cursor,
                                                                 items)))
        if rejects:
            entries.append((REJECT, queue_state.offsets_payload([o for o, _ in rejects])))
        if dropped:
            entries.append((DROP, queue_state.offsets_payload(dropped)))
        if entries:
            # acquisitions are not fsync'd (see queue_state); a reject is, before it counts
            self.store.append(entries, sync=bool(rejects))
        # applied only once written
        if new_cursor is not None:
            self.cursor = new_cursor
        lock_until = now + q.lock_ms
        out = []
        ver = self._ver
        for (off, count, at), (_, _, rec) in zip(items, taken, strict=True):
            e = inflight.get(off)
            if e is None:
                e = inflight[off] = _Entry(count, at, 0)
            e.count, e.avail_at, e.holder, e.lock_until = count, at, q, lock_until
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
        i = 0
        while i < len(offsets):
            j = i
            while j + 1 < len(offsets) and offsets[j + 1] - offsets[i] < _READ_SPAN:
                j += 1
            wanted = set(offsets[i:j + 1])
            for rec in self.log.read(offsets[i], max_records=offsets[j] - offsets[i] + 1):
                if rec.offset in wanted:
                    out[rec.offset] = rec
            i = j + 1
        return out

    # ------------------------------------------------------------------ finish

    def check_held(self, q: QueueConsumer, items: list[tuple[int, int]], now: int) -> None:
        """Raise KdelayError unless `q` holds every (offset, delivery count) with a lock
        that has not run out. Changes nothing."""
        for off, count in items:
            e = self.inflight.get(off)
            if e is None or e.holder is not q or e.count != count:
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
            payload = queue_state.release_payload([(o, avail_at) for o in offsets])
        else:
            payload = queue_state.offsets_payload(offsets)
        lsn = self.store.append([(kind, payload)], sync=False)
        inflight = self.inflight
        if kind == RELEASE:
            for off in offsets:
                e = inflight[off]
                e.holder, e.avail_at, e.version = None, avail_at, next(self._ver)
                heapq.heappush(self._avail, (avail_at, off, e.version))
        else:
            for off in offsets:
                del inflight[off]
            if kind == ACK:
                self.acked += len(offsets)
            else:
                self.rejected += len(offsets)
        self._maybe_compact()
        return lsn

    def renew(self, offsets: list[int], until: int) -> None:
        for off in offsets:
            e = self.inflight[off]
            e.lock_until, e.version = until, next(self._ver)
            heapq.heappush(self._locks, (until, off, e.version))

    def release_all(self, q: QueueConsumer) -> int:
        """Make every record `q` holds available again at its place (close): O(in-flight).
        The journal notes it without an fsync: it only keeps `kdelay stats` from showing
        them as held (after a restart they are available anyway)."""
        items = []
        for off, e in self.inflight.items():
            if e.holder is q:
                e.holder, e.version = None, next(self._ver)
                heapq.heappush(self._avail, (e.avail_at, off, e.version))
                items.append((off, e.avail_at))
        if items and not self.store.failed:
            with contextlib.suppress(KdelayError):  # best effort: closing must not fail
                self.store.append([(RELEASE, queue_state.release_payload(items))],
                                  sync=False)
        return len(items)

    def _maybe_compact(self) -> None:
        if self.store.should_compact(len(self.inflight)):
            self.store.compact(self.cursor, self.acked, self.rejected,
                               [(o, e.count | (0 if e.holder is None else ACQUIRED_BIT),
                                 e.avail_at) for o, e in self.inflight.items()])

    def _check_open(self) -> None:
        if self.closed:
            raise KdelayError(f"queue group {self.group!r} on {self.log.path} is closed")
        self.store._check_failed()

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


def _on_append(log_ref: weakref.ref) -> None:
    """A Log's append listener (one per Log, whatever the number of groups): wake the
    consumers of every queue group open on it."""
    log = log_ref()
    if log is None:
        return
    with _REGISTRY_LOCK:
        parts = list(_REGISTRY.get(log, {}).values())
    for part in parts:
        part.notify()


def _attach(log: Log, group: str, compact_min_bytes: int) -> _GroupPartition:
    with _REGISTRY_LOCK:
        groups = _REGISTRY.get(log)
        if groups is None:
            groups = _REGISTRY[log] = {}
            ref = weakref.ref(log)  # the listener must not keep the log alive
            log.add_append_listener(lambda _result: _on_append(ref))
        part = groups.get(group)
        if part is None or part.closed:
            if log.closed:
                raise KdelayError(f"log {log.path} is closed")
            part = groups[group] = _GroupPartition(log, group, compact_min_bytes)
        part.refs += 1
        return part


def _detach(part: _GroupPartition) -> None:
    with _REGISTRY_LOCK, part.lock:
        part.refs -= 1
        if part.refs == 0:
            part.closed = True
            part.store.close()
            groups = _REGISTRY.get(part.log)
            if groups is not None and groups.get(part.group) is part:
                del groups[part.group]


def open_groups(log: Log) -> dict[str, _GroupPartition]:
    """The queue groups with a live state on `log` (for metrics)."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY.get(log, {}))


class QueueConsumer:
    """`QueueConsumer(log_or_topic, group, *, lock_ms=30_000, max_delivery_count=5,
    dead_letter=None)`: one member of a queue group (see the module docstring).

    Thread-safe to share, but meant as one per worker thread; many QueueConsumers of one
    group share the group's state on each open Log."""

    def __init__(self, source: Log | Topic, group: str, *, lock_ms: int = 30_000,
                 max_delivery_count: int = 5, dead_letter: Log | Topic | None = None,
                 compact_min_bytes: int = 1 << 20):
        if isinstance(source, Topic):
            logs, self._is_topic = source.logs, True
        elif isinstance(source, Log):
            logs, self._is_topic = [source], False
        else:
            raise KdelayError(f"QueueConsumer needs a Log or a Topic, "
                              f"got {type(source).__name__}")
        queue_state.validate_group(group)
        if not _is_int(lock_ms) or lock_ms < 0:
            raise KdelayError(f"lock_ms must be a non-negative int, got {lock_ms!r}")
        if not _is_int(max_delivery_count) or max_delivery_count < 1:
            raise KdelayError(f"max_delivery_count must be an int >= 1, "
                              f"got {max_delivery_count!r}")
        if dead_letter is not None and not isinstance(dead_letter, (Log, Topic)):
            raise KdelayError(f"dead_letter must be a Log or a Topic, "
                              f"got {type(dead_letter).__name__}")
        if not _is_int(compact_min_bytes) or compact_min_bytes < 0:
            raise KdelayError("compact_min_bytes must be a non-negative int")
        self.source, self.group = source, group
        self.lock_ms, self.max_delivery_count = lock_ms, max_delivery_count
        self.dead_letter = dead_letter
        self._signal = ActivitySignal()
        self._parts: list[_GroupPartition] = []
        try:
            for log in logs:
                part = _attach(log, group, compact_min_bytes)
                self._parts.append(part)
                part.subscribe(self._signal)
        except BaseException:
            for part in self._parts:
                part.unsubscribe(self._signal)
                _detach(part)
            raise
        self._start = 0
        self._closed = False

    # ------------------------------------------------------------------ poll

    def poll(self, max_records: int = 500, timeout_ms: int = 0) -> list[QueueRecord]:
        """Acquire up to `max_records` due records, in (time, offset) order per partition.
        With `timeout_ms` > 0 and nothing to acquire, waits (asleep) until an append, a
        release, a lock expiry or a delayed record makes one available, or time is up."""
        if not _is_int(max_records) or max_records < 1:
            raise KdelayError(f"max_records must be a positive int, got {max_records!r}")
        if not _is_int(timeout_ms) or timeout_ms < 0:
            raise KdelayError(f"timeout_ms must be a non-negative int, got {timeout_ms!r}")
        self._check_open()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            seen = self._signal.version  # before the round: no wake-up in between is lost
            out = self._poll_round(max_records)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            wait = remaining
            for part in self._parts:
                now = part.log.now()
                times = [part.next_event(now), part.log.earliest_pending(now)]
                for t in times:
                    if t is not None:
                        wait = min(wait, max(0.001, (t - now) / 1000))
            self._signal.wait(seen, wait)
            self._check_open()

    def _poll_round(self, max_records: int) -> list[QueueRecord]:
        n = len(self._parts)
        if n == 1:
            return self._parts[0].poll(self, max_records, None)
        order = [(self._start + k) % n for k in range(n)]
        self._start = (self._start + 1) % n
        out: list[QueueRecord] = []
        budget, active = max_records, order
        while budget > 0 and active:
            share = max(1, budget // len(active))
            still_full = []
            for i in active:
                if budget <= 0:
                    break
                take = min(share, budget)
                got = self._parts[i].poll(self, take, i)
                out += got
                budget -= len(got)
                if len(got) == take:
                    still_full.append(i)
            active = still_full
        return out

    # ------------------------------------------------------------------ ack / release

    def ack(self, records: Iterable[QueueRecord]) -> None:
        """Done: never delivered to this group again. Durable when it returns."""
        self._finish(records, ACK)

    def reject(self, records: Iterable[QueueRecord]) -> None:
        """Never delivered again; appended to `dead_letter` (if set) first. Durable."""
        self._finish(records, REJECT)

    def release(self, records: Iterable[QueueRecord], delay_ms: int = 0) -> None:
        """Offer again to the group, no earlier than now + `delay_ms` on the log clock (the
        record keeps its offset; nothing is appended). Durable when it returns."""
        if not _is_int(delay_ms) or delay_ms < 0:
            raise KdelayError(f"delay_ms must be a non-negative int, got {delay_ms!r}")
        self._finish(records, RELEASE, delay_ms)

    def renew(self, records: Iterable[QueueRecord]) -> None:
        """Extend the locks of held records to `lock_ms` from now (not persisted: a lock
        does not outlive the process)."""
        self._finish(records, None)

    def _finish(self, records: Iterable[QueueRecord], kind: int | None,
                delay_ms: int = 0) -> None:
        self._check_open()
        by_part = self._by_partition(records)
        parts = sorted(by_part)
        locks = [self._parts[i].lock for i in parts]
        for lk in locks:
            lk.acquire()
        try:
            nows = {}
            for i in parts:
                part = self._parts[i]
                part._check_open()
                nows[i] = part.log.now()
                part.check_held(self, [(o, c) for o, c, _ in by_part[i]], nows[i])
            if kind == REJECT:
                self._dead_letter([r for i in parts for _, _, r in by_part[i]])
            pending = []
            for i in parts:
                offsets = [o for o, _, _ in by_part[i]]
                if kind is None:
                    self._parts[i].renew(offsets, nows[i] + self.lock_ms)
                else:
                    lsn = self._parts[i].finish(kind, offsets, nows[i] + delay_ms)
                    pending.append((self._parts[i].store, lsn))
        finally:
            for lk in locks:
                lk.release()
        for store, lsn in pending:  # group commit: outside the locks
            store.sync_to(lsn)
        if kind == RELEASE:
            for i in parts:
                self._parts[i].notify()

    def _by_partition(self, records: Iterable[QueueRecord]) -> dict[int, list]:
        if isinstance(records, QueueRecord):
            raise KdelayError("pass a list of records, not one record")
        try:
            recs = list(records)
        except TypeError:
            raise KdelayError(f"records must be an iterable of QueueRecord, "
                              f"got {type(records).__name__}") from None
        by_part: dict[int, list] = {}
        seen = set()
        for r in recs:
            if not isinstance(r, QueueRecord):
                raise KdelayError(f"expected records polled by a QueueConsumer, "
                                  f"got {type(r).__name__}")
            p = r.partition
            if self._is_topic:
                if not _is_int(p) or not 0 <= p < len(self._parts):
                    raise KdelayError(f"record has partition {p!r}, not one of this topic's")
                i = p
            elif p is not None:
                raise KdelayError(f"record has partition {p!r} but this consumer reads a Log")
            else:
                i = 0
            if (i, r.offset) in seen:
                raise KdelayError(f"offset {r.offset} appears twice in one call")
            seen.add((i, r.offset))
            by_part.setdefault(i, []).append((r.offset, r.delivery_count, r))
        return by_part

    def _dead_letter(self, records: list) -> None:
        """Copy records (key, value, headers) to the dead-letter log and flush it, before
        the reject is journaled: a crash in between dead-letters a record twice at worst."""
        dl = self.dead_letter
        if dl is None or not records:
            return
        copies = [Record(r.value, r.key, list(r.headers)) for r in records]
        if isinstance(dl, Topic):
            touched = {dl.send([c])[0] for c in copies}
            for p in touched:
                dl.partition(p).flush()
        else:
            dl.append(copies)
            dl.flush()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Leave the group: records this consumer holds are available again at once."""
        if self._closed:
            return
        self._closed = True
        for part in self._parts:
            part.unsubscribe(self._signal)
            with part.lock:
                released = part.release_all(self)
            if released:
                part.notify()
            _detach(part)
        self._signal.bump()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> QueueConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KdelayError("QueueConsumer is closed")


def queue_metrics(log: Log, now: int) -> dict[str, dict]:
    """Per queue group with state on `log`: acquired, available (due now: released, expired
    or never delivered), delayed (released with a delay, not yet due), acked, rejected. An
    open group is read from memory; others from their files (O(in flight) each)."""
    live = open_groups(log)
    out: dict[str, dict] = {}
    for group in sorted(set(queue_state.group_names(log.path)) | set(live)):
        part = live.get(group)
        if part is not None:
            counts = part.counts(now)
        else:
            try:
                st = queue_state.load(log.path, group)
            except KdelayError as e:
                out[group] = {"error": str(e)}
                continue
            delayed = sum(1 for _, at in st.inflight.values() if at > now)
            counts = {"acquired": 0, "available": len(st.inflight) - delayed,
                      "delayed": delayed, "acked": st.acked, "rejected": st.rejected,
                      "in_flight": len(st.inflight), "cursor": st.cursor}
        counts["available"] += log.due_after([counts["cursor"]], now)[0]
        out[group] = counts
    return out


METRICS_SECTIONS["queues"] = queue_metrics
