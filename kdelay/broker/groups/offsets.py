"""Committed offsets of wire groups, kept as the engine's group positions.

A group's committed offset on a partition is stored with `Log.commit(group, key)`, the key
being the position of a consumer whose next offset is the committed one (on a delayed topic
through the due-order view: delivery offset n -> the key of the n-th record due). So the
wire group `g` and `Consumer(topic, "g")` in process are one position, either way round.
Durable when `commit` returns (the engine fsyncs the position file); the fsyncs run on a
worker thread so that the event loop keeps serving. Commit metadata strings are not kept.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ...errors import KdelayError, OffsetOutOfRangeError

if TYPE_CHECKING:
    from ..served import ServedPartitions

NO_OFFSET = -1


class OffsetStore:
    def __init__(self, served: ServedPartitions):
        self.served = served

    async def commit(self, group: str, topic: str, partition: int, offset: int) -> ErrorCode:
        """Store the group's next offset on one partition; the error code to answer."""
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
        log = part.log
        try:
            await asyncio.get_running_loop().run_in_executor(None, log.commit, group, key)
        except KdelayError:
            return ErrorCode.unknown_server_error
        return ErrorCode.none

    def fetch(self, group: str, topic: str, partition: int) -> tuple[int, ErrorCode]:
        """(committed next offset or -1, error code)."""
        try:
            served = self.served.get(topic, partition)
        except KdelayError:
            return NO_OFFSET, ErrorCode.unknown_server_error
        if served is None:
            return NO_OFFSET, ErrorCode.unknown_topic_or_partition
        part = served.partition
        if not _has_position(part.log, group):
            return NO_OFFSET, ErrorCode.none
        return part.offset_after(part.log.committed(group)), ErrorCode.none


def _has_position(log, group: str) -> bool:
    """Whether `group` has ever stored a position on this log (one stat)."""
    return os.path.exists(log._groups.path(group))
