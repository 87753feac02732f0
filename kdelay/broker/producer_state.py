"""Idempotent producers: per partition and producer id, the epoch and the last five batches
(first and last sequence, base offset), as Kafka's ProducerStateManager keeps them.

No file of its own: the log already holds it. Every stored batch keeps its producer id,
epoch and first sequence in its header (client_batch.pyx writes them), so after a restart
or kill -9 the state is read back from the log itself, and is exactly as durable as the
batches it describes: a batch lost in a crash was never acknowledged, and its retry is
appended, not answered as a duplicate. The read-back is lazy, the first time an idempotent
producer writes to a partition after a start: it walks the batch headers of the
partition's last two local segments (one read per 8 MiB). A producer whose last batch on a
partition is older than that is treated as one the partition does not know (its next
sequence is accepted as it comes, as after Kafka's producer-state expiry).

The rules (`check`): a batch of an older epoch is refused (INVALID_PRODUCER_EPOCH); a newer
epoch must start at sequence 0; in the same epoch, a batch equal to one of the last five is
a duplicate (answered with its original base offset, written again never), one that
follows the last is appended, anything else is OUT_OF_ORDER_SEQUENCE_NUMBER. Sequences wrap
at 2**31 as Kafka's do. Cost: O(1) per batch; the read-back O(bytes of two segments).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .. import fsio
from ..log.batch import walker
from ..partition import Log

RECENT = 5  # batches remembered per producer and partition, as Kafka does
_SEQ_WRAP = 1 << 31


@dataclass
class ProducerEntry:
    epoch: int
    # (first sequence, last sequence, base offset) of the newest batches, oldest first
    batches: deque = field(default_factory=lambda: deque(maxlen=RECENT))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class Verdict:
    APPEND = "append"
    DUPLICATE = "duplicate"


class ProducerStates:
    """Producer entries of every partition the broker serves: (topic, partition) ->
    {producer id: ProducerEntry}."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], dict[int, ProducerEntry]] = {}

    def forget_topic(self, name: str, event: str = "deleted") -> None:
        """A topic listener (topics.py): a deleted topic's state goes with it."""
        if event == "deleted":
            for key in [k for k in self._partitions if k[0] == name]:
                del self._partitions[key]

    def _producers(self, topic: str, partition: int, log: Log) -> dict[int, ProducerEntry]:
        key = (topic, partition)
        producers = self._partitions.get(key)
        if producers is None:
            producers = self._partitions[key] = read_back(log)
        return producers

    def check(self, topic: str, partition: int, log: Log, producer_id: int, epoch: int,
              first: int, last: int) -> tuple[str, int] | ErrorCode:
        """(APPEND, -1), (DUPLICATE, the original base offset), or the error to answer."""
        entry = self._producers(topic, partition, log).get(producer_id)
        if entry is None:
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

    def appended(self, topic: str, partition: int, log: Log, producer_id: int, epoch: int,
                 first: int, last: int, base_offset: int) -> None:
        producers = self._producers(topic, partition, log)
        entry = producers.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = producers[producer_id] = ProducerEntry(epoch)
        entry.batches.append((first, last, base_offset))


def read_back(log: Log) -> dict[int, ProducerEntry]:
    """The producer entries the last two local segments' batch headers give. A client batch
    stored as several runs is put back together: a stored batch continues the one before
    it when it has the same producer and epoch, and its sequence and offset both follow."""
    producers: dict[int, ProducerEntry] = {}
    bases = log.segments[-2:]
    for base in bases:
        path = os.path.join(log.path, f"{base:020d}.log")
        if not os.path.exists(path):  # held only in the object store
            continue
        fd = fsio.open_read(path)
        try:
            size = os.fstat(fd).st_size
            for frame in walker.frames(_reader(fd), 0, size, path=path):
                h = frame.header
                if h.producer_id < 0:
                    continue
                _remember(producers, h.producer_id, h.producer_epoch, h.base_sequence,
                          h.base_sequence + h.record_count - 1, h.base_offset)
        except Exception:  # a torn tail the log's own recovery has not cut: use what we have
            pass
        finally:
            os.close(fd)
    return producers


def _reader(fd: int) -> walker.Reader:
    return lambda pos, n: fsio.pread(fd, n, pos)


def _remember(producers: dict[int, ProducerEntry], pid: int, epoch: int, first: int,
              last: int, base: int) -> None:
    entry = producers.get(pid)
    if entry is None or entry.epoch != epoch:
        entry = producers[pid] = ProducerEntry(epoch)
    if entry.batches:
        f0, l0, b0 = entry.batches[-1]
        if first == l0 + 1 and base == b0 + (l0 - f0) + 1:
            entry.batches[-1] = (f0, last, b0)  # the next run of the same client batch
            return
    entry.batches.append((first, last, base))
