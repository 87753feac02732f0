"""ListOffsets (key 2), v1..v11: a partition's offsets as consumers look them up for
`auto.offset.reset` and seeks by time. On a delayed topic these are delivery offsets
(EARLIEST: the log start, LATEST: the high watermark, a timestamp T: the first delivery
offset whose record's deliverAfter is T or later, with that deliverAfter as its timestamp);
on a plain topic log offsets, by the records' timestamps (the time index).
Cost: per partition a view extension and one binary search (plain: a time-index search
and a walk within one segment)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from ...errors import CorruptLogError
from ..dispatcher import Api, RequestContext
from ..responses import build, entry_type
from ..view_file import ViewDamagedError

LIST_OFFSETS_KEY = 2
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    topic_type = entry_type(ctx.response_type, "topics")
    part_type = entry_type(topic_type, "partitions")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            error, ts, offset = _look_up(ctx, t.name, p.partition_index, p.timestamp)
            parts.append(build(part_type, partition_index=p.partition_index, error_code=error,
                               timestamp=i64(ts), offset=i64(offset), leader_epoch=i32(0),
                               old_style_offsets=(i64(offset),) if offset >= 0 else ()))
        topics.append(build(topic_type, name=t.name, partitions=tuple(parts)))
    return build(ctx.response_type, throttle_time=i32Timedelta.parse(timedelta(0)), topics=tuple(topics))


def _look_up(ctx: RequestContext, topic: str, partition: int, timestamp: int
             ) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) for one partition."""
    try:
        served = ctx.broker.served.get(topic, partition)
    except ViewDamagedError:
        return ErrorCode.kafka_storage_error, -1, -1
    if served is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    sp = served.partition
    try:
        sp.extend()
        if timestamp == LATEST:
            return ErrorCode.none, -1, sp.high_watermark
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return ErrorCode.none, -1, sp.log_start
        if timestamp < 0:  # MAX_TIMESTAMP and the tiered lookups are not answered
            return ErrorCode.invalid_request, -1, -1
        offset, found = sp.offset_for_time(timestamp)
    except (ViewDamagedError, CorruptLogError):
        return ErrorCode.kafka_storage_error, -1, -1
    return ErrorCode.none, found, offset


APIS = [Api(LIST_OFFSETS_KEY, 1, 11, handle_list_offsets, name="ListOffsets")]
