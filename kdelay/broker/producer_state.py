"""Idempotent producers: per partition and producer id, the epoch, the last append time and
the last five batches (first and last sequence, base offset), as Kafka's
ProducerStateManager keeps them.

Durable as the log is: every stored batch keeps its producer id, epoch and first sequence
in its header (client_batch.pyx writes them), and whenever a partition's active segment
changes the state of every batch below the new segment is written to the partition's
snapshot (producer_snapshot.py), as Kafka snapshots at each roll (and at a clean stop, at
the log end). After a restart or kill -9 a partition's state is that snapshot plus a walk
of the batch headers from its offset to the log end (at most the active segment: one read
per 8 MiB), however many segments the log has; without a snapshot that reads back whole (none yet, or damaged: never trusted), or
with one past the log end, the walk covers every local segment once and a new snapshot
follows at the next append. A batch lost in a crash was never acknowledged, so its retry
is appended, not answered as a duplicate: a snapshot only names batches below a roll, and
a roll fsyncs them first.

A producer that has not appended for `producer.id.expiration.ms` (broker-wide, Kafka's
name and default: one day) is forgotten, as Kafka expires producer ids: its next batch is
accepted with whatever sequence it has, as a new producer's.

The rules (`check`): a batch of an older epoch is refused (INVALID_PRODUCER_EPOCH); a newer
epoch must start at sequence 0; in the same epoch, a batch equal to one of the last five is
a duplicate (answered with its original base offset, written again never), one that
follows the last is appended, anything else is OUT_OF_ORDER_SEQUENCE_NUMBER. Sequences wrap
at 2**31 as Kafka's do. Cost: O(1) per batch; O(producers) per roll (the snapshot); the
load O(producers + bytes of the segments after the snapshot), once per partition and start.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from .. import fsio
from ..errors import CorruptLogError, KdelayError
from ..log.batch import walker
from ..log.segments.layout import LOG_SUFFIX, segment_file
from ..partition import Log
from .producer_snapshot import (
    RECENT,
    SnapshotDamagedError,
    SnapshotEntry,
    read_snapshot,
    write_snapshot,
)
from .settings import int_default

if TYPE_CHECKING:
    from .settings import BrokerSettings

log = logging.getLogger("kdelay.broker")

DEFAULT_EXPIRATION_MS = int_default("producer.id.expiration.ms")
_SEQ_WRAP = 1 << 31


def expiration_ms(settings: BrokerSettings) -> int:
    """`producer.id.expiration.ms`, broker-wide (BrokerConfigError if it is not >= 1)."""
    return int(settings.config("producer.id.expiration.ms"))


@dataclass
class ProducerEntry:
    epoch: int
    last_time: int = 0  # log clock at its last append (ms): expiry counts from it
    # (first sequence, last sequence, base offset) of the newest batches, oldest first
    batches: deque = field(default_factory=lambda: deque(maxlen=RECENT))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class Verdict:
    APPEND = "append"
    DUPLICATE = "duplicate"


@dataclass
class PartitionProducers:
    """One partition's producers, the offset of its snapshot on disk (-1: none that the
    next restart could use as it is), and the partition's Log as last seen (for `close`)."""
    producers: dict[int, ProducerEntry]
    snapshot_offset: int
    log: Log | None = None


class ProducerStates:
    """Producer entries of every partition the broker serves: (topic, partition) ->
    PartitionProducers, loaded on a partition's first produce after a start."""

    def __init__(self, expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        self.expiration_ms = expiration_ms
        self._partitions: dict[tuple[str, int], PartitionProducers] = {}

    def forget_topic(self, name: str, event: str = "deleted") -> None:
        """A topic listener (topics.py): a deleted topic's state goes with it."""
        if event == "deleted":
            for key in [k for k in self._partitions if k[0] == name]:
                del self._partitions[key]

    def _partition(self, topic: str, partition: int, plog: Log) -> PartitionProducers:
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = load(plog, self.expiration_ms)
        state.log = plog
        return state

    def check(self, topic: str, partition: int, plog: Log, producer_id: int, epoch: int,
              first: int, last: int) -> tuple[str, int] | ErrorCode:
        """(APPEND, -1), (DUPLICATE, the original base offset), or the error to answer."""
        producers = self._partition(topic, partition, plog).producers
        entry = producers.get(producer_id)
        if entry is None:
            return Verdict.APPEND, -1
        if plog.now() - entry.last_time >= self.expiration_ms:
            del producers[producer_id]  # expired: as a producer the partition never knew
            return Verdict.APPEND, -1
        if epoch < entry.epoch:
            return ErrorCode.invalid_producer_epoch
        if epoch > entry.epoch:
            return (Verdict.APPEND, -1) if first == 0 else \
                ErrorCode.out_of_order_sequence_number
        for seq_first, seq_last, base in entry.batches:
            if seq_first <= first and last <= seq_last:  # (read back, runs of one client
                # batch, or of several that follow each other, are one entry)
                return Verdict.DUPLICATE, base + first - seq_first
        if first == (entry.last_sequence + 1) % _SEQ_WRAP:
            return Verdict.APPEND, -1
        return ErrorCode.out_of_order_sequence_number

    def appended(self, topic: str, partition: int, plog: Log, producer_id: int, epoch: int,
                 first: int, last: int, base_offset: int, append_time: int) -> None:
        producers = self._partition(topic, partition, plog).producers
        entry = producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append((first, last, base_offset))
        entry.last_time = max(entry.last_time, append_time)

    def after_append(self, topic: str, partition: int, plog: Log) -> None:
        """After an append to the partition (and `appended` for it): if its active segment
        began after the snapshot's offset (a roll since), write the state of the batches
        below the active segment as the new snapshot. O(1), O(producers) when it writes. A failed write is
        logged and tried again at the next append (the old snapshot still holds)."""
        state = self._partition(topic, partition, plog)
        active = plog.reads.active_base()
        if active <= state.snapshot_offset:
            return
        now = plog.now()
        for pid in [p for p, e in state.producers.items()
                    if now - e.last_time >= self.expiration_ms]:
            del state.producers[pid]
        try:
            write_snapshot(plog.path, active, below(state.producers, active))
        except OSError as e:
            log.warning("producer-state snapshot of %s-%d not written: %s", topic, partition, e)
            return
        state.snapshot_offset = active

    def close(self) -> None:
        """At a clean stop (every request answered): snapshot each loaded partition at its
        log end, after an fsync of the log, as Kafka does at shutdown, so that the next
        start walks nothing. A partition whose log is gone or closed keeps the snapshot it
        has. O(producers) and an fsync per partition written."""
        for (topic, partition), state in self._partitions.items():
            plog = state.log
            if plog is None:
                continue
            try:
                end = plog.log_end_offset
                if end == state.snapshot_offset:
                    continue
                plog.flush()
                write_snapshot(plog.path, end, below(state.producers, end))
                state.snapshot_offset = end
            except (OSError, KdelayError) as e:
                log.warning("producer-state snapshot of %s-%d not written at stop: %s",
                            topic, partition, e)


def below(producers: dict[int, ProducerEntry], offset: int) -> dict[int, SnapshotEntry]:
    """The producers' state from the batches below `offset` only (an entry read back as
    several client batches is cut where it reaches `offset`)."""
    out: dict[int, SnapshotEntry] = {}
    for pid, e in producers.items():
        kept = []
        for first, last, base in e.batches:
            if base < offset:
                kept.append((first, min(last, first + offset - 1 - base), base))
        if kept:
            out[pid] = SnapshotEntry(e.epoch, e.last_time, kept)
    return out


def load(plog: Log, expiration_ms: int) -> PartitionProducers:
    """A partition's producers: its snapshot (if it reads back whole and lies within the
    log), then the batch headers from the snapshot's offset (else from the first local
    segment) to the log end."""
    now = plog.now()
    producers: dict[int, ProducerEntry] = {}
    start = -1
    try:
        snapshot = read_snapshot(plog.path)
    except SnapshotDamagedError as e:
        log.warning("producer-state snapshot damaged, rebuilt from the log: %s", e)
        snapshot = None
    if snapshot is not None:
        offset, entries = snapshot
        if offset > plog.log_end_offset:
            log.warning("producer-state snapshot of %s is at offset %d, past the log end %d: "
                        "rebuilt from the log", plog.path, offset, plog.log_end_offset)
        else:
            start = offset
            for pid, entry in entries.items():
                if now - entry.last_time < expiration_ms:
                    producers[pid] = ProducerEntry(entry.epoch, entry.last_time,
                                                   deque(entry.batches, maxlen=RECENT))
    bases = plog.segments
    start_at = max(start, bases[0])
    if start_at < plog.log_end_offset:
        _replay(plog, bases, start_at, producers, now)
    if start < 0 and len(bases) == 1:
        start = bases[0]  # a one-segment log needs no snapshot until it rolls
    return PartitionProducers(producers, start)


def _replay(plog: Log, bases: list[int], start: int, producers: dict[int, ProducerEntry],
            now: int) -> None:
    """Apply the producer batches at or past offset `start` of the local segments. A run
    of a client batch is put back together with the one before it: a stored batch
    continues the entry's last batch when it has the same producer and epoch, and its
    sequence and offset both follow. A batch's append time is not stored: its deliverAfter
    (never before it), or now, whichever is earlier, stands for it. The walk starts at the
    batch at `start` (found by the offset index) when `start` lies inside a segment."""
    first = max(0, bisect.bisect_right(bases, start) - 1)
    for base in bases[first:]:
        path = segment_file(plog.path, base, LOG_SUFFIX)
        if not os.path.exists(path):  # held only in the object store
            continue
        fd = fsio.open_read(path)
        try:
            size = os.fstat(fd).st_size
            at = _position_of(plog, start) if base == bases[first] and base < start else 0
            for frame in walker.frames(_reader(fd), at, size, path=path):
                h = frame.header
                if h.producer_id >= 0 and h.base_offset >= start:
                    _remember(producers, h.producer_id, h.producer_epoch, h.base_sequence,
                              h.base_sequence + h.record_count - 1, h.base_offset,
                              min(h.deliver_after, now))
        except CorruptLogError as e:  # damage recovery left in a flushed segment: skip it
            log.warning("producer state: %s", e)
        finally:
            os.close(fd)


def _position_of(plog: Log, offset: int) -> int:
    """The file position of the batch holding `offset` in its segment (0: not found)."""
    found = plog.reads.batch_position(offset)
    return 0 if found is None else found


def _reader(fd: int) -> walker.Reader:
    return lambda pos, n: fsio.pread(fd, n, pos)


def _remember(producers: dict[int, ProducerEntry], pid: int, epoch: int, first: int,
              last: int, base: int, when: int) -> None:
    entry = producers.get(pid)
    if entry is None or entry.epoch != epoch:
        entry = producers[pid] = ProducerEntry(epoch)
    entry.last_time = max(entry.last_time, when)
    if entry.batches:
        f0, l0, b0 = entry.batches[-1]
        if first == l0 + 1 and base == b0 + (l0 - f0) + 1:
            entry.batches[-1] = (f0, last, b0)  # the next run of the same client batch
            return
    entry.batches.append((first, last, base))
