"""Committed offsets of wire groups, kept as the engine's group positions.

A group's committed offset on a partition is stored with the engine's group positions, the
key being the position of a consumer whose next offset is the committed one (on a delayed
topic through the due-order view: delivery offset n -> the key of the n-th record due). So
the wire group `g` and `Consumer(topic, "g")` in process are one position, either way round.

Commits are group-committed: those that arrive while a write is under way wait for the next
one, which writes them all on one worker thread with `Log.commit_many`: per log, one append
of a checksummed record per group to the log's commit journal and one fdatasync
(kdelay/groups/positions.py). Each commit is answered once its batch is durable. So 1,000
groups committing once a second cost a few thread hand-offs and a few fdatasyncs a second,
not a thousand. Commit metadata strings are not kept.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ...errors import KdelayError, OffsetOutOfRangeError
from ...records import DeliveryKey

if TYPE_CHECKING:
    from ...partition import Log
    from ..served import ServedPartitions
    from ..topics import TopicRegistry

NO_OFFSET = -1
Pending = tuple["Log", str, "DeliveryKey | None", asyncio.Future]


class OffsetStore:
    def __init__(self, served: ServedPartitions):
        self.served = served
        self._pending: list[Pending] = []
        self._writing = False

    async def commit(self, group: str, topic: str, partition: int, offset: int) -> ErrorCode:
        """Store the group's next offset on one partition; the error code to answer. Cost
        on the loop: one small read (the key) and a share of a batch's hand-off."""
        try:
            served = self.served.get(topic, partition)
        except KdelayError:
            return ErrorCode.unknown_server_error
        if served is None:
            return ErrorCode.unknown_topic_or_partition
        if offset < 0:
            return ErrorCode.invalid_commit_offset_size
        part = served.partition
        try:
            key = part.key_before(offset)
        except OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range
        done = asyncio.get_running_loop().create_future()
        self._pending.append((part.log, group, key, done))
        if not self._writing:
            self._writing = True
            asyncio.get_running_loop().create_task(self._write_batches())
        return await done

    async def _write_batches(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    errors = await loop.run_in_executor(None, _write, batch)
                except Exception:  # noqa: BLE001 (answered as an error, never left waiting)
                    errors = [ErrorCode.unknown_server_error] * len(batch)
                for (_, _, _, done), error in zip(batch, errors, strict=True):
                    if not done.done():
                        done.set_result(error)
        finally:
            self._writing = False

    def fetch(self, group: str, topic: str, partition: int) -> tuple[int, ErrorCode]:
        """(committed next offset or -1, error code)."""
        try:
            served = self.served.get(topic, partition)
        except KdelayError:
            return NO_OFFSET, ErrorCode.unknown_server_error
        if served is None:
            return NO_OFFSET, ErrorCode.unknown_topic_or_partition
        part = served.partition
        try:
            if not part.log.clients.has_position(group):
                return NO_OFFSET, ErrorCode.none
            return part.offset_after(part.log.committed(group)), ErrorCode.none
        except KdelayError:  # a damaged commit journal (kdelay verify names it)
            return NO_OFFSET, ErrorCode.unknown_server_error

    def groups(self, topics: TopicRegistry) -> set[str]:
        """Every group with a committed offset on a partition of `topics` (ListGroups):
        O(partitions + positions), from memory; admin calls only."""
        out: set[str] = set()
        for topic in topics:
            for i in range(topic.partitions):
                out.update(topic.partition(i).clients.positions.groups())
        return out

    def has_offsets(self, group: str, topics: TopicRegistry) -> bool:
        """Whether `group` committed an offset on a partition of `topics` (DescribeGroups
        of a group with no members): a dict lookup per partition, admin calls only."""
        return any(_has_position(topic.partition(i), group)
                   for topic in topics for i in range(topic.partitions))


    async def delete(self, group: str, topics: TopicRegistry) -> bool:
        """Forget `group`'s committed offsets on every partition of `topics` (DeleteGroups
        of a group with no members), on a worker thread: one journal append and fdatasync
        per partition that had one. Whether any had one; KdelayError if a log refuses."""
        logs = [topic.partition(i) for topic in topics for i in range(topic.partitions)]
        logs = [log for log in logs if _has_position(log, group)]
        if not logs:
            return False
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: [log.clients.delete_group(group) for log in logs])
        return True


def _write(batch: list[Pending]) -> list[ErrorCode]:
    """One batch of commits, by log (worker thread): each log's positions at once; the last
    commit of a group on a log wins, as it would have in order."""
    by_log: dict[int, tuple[Log, dict[str, DeliveryKey | None]]] = {}
    for log, group, key, _ in batch:
        by_log.setdefault(id(log), (log, {}))[1][group] = key
    failed: set[int] = set()
    for log_id, (log, positions) in by_log.items():
        try:
            log.commit_many(positions)
        except KdelayError:
            failed.add(log_id)
    return [ErrorCode.unknown_server_error if id(log) in failed else ErrorCode.none
            for log, _, _, _ in batch]


def _has_position(log, group: str) -> bool:
    """Whether `group` has a stored position on this log (a dict lookup; False where the
    log's commit journal is damaged: its errors are answered where offsets are read)."""
    try:
        return log.clients.has_position(group)
    except KdelayError:
        return False
