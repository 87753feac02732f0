"""DescribeLogDirs (key 35, v1..v4): ROOT as the broker's one log directory, with the local
size of each partition asked for (all of them when the request names none), and, from v4,
the size and free space of the volume ROOT is on.

A partition's size is what Kafka reports: the bytes of its local segment files (`*.log`),
not its indexes, not what the tiered store holds. A topic or partition the broker does not
have is left out, as Kafka leaves out what a broker does not host. Admin tools and UIs ask
for this to show where the disk goes; the operations endpoint's metrics say the same per
topic. Cost: one directory listing per partition named (a stat per segment).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from ...log.segments.layout import list_segments
from ..dispatcher import Api, RequestContext
from ..responses import build, entry_type

DESCRIBE_LOG_DIRS_KEY = 35


async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    result_type = entry_type(ctx.response_type, "results")
    topic_type = entry_type(result_type, "topics")
    part_type = entry_type(topic_type, "partitions")
    registry = ctx.broker.topics
    wanted: Iterable[tuple[str, Iterable[int] | None]] = \
        [(name, None) for name in registry.names()] if request.topics is None else \
        [(t.topic, t.partitions) for t in request.topics]
    topics = []
    for name, partitions in wanted:
        topic = registry.get(name)
        if topic is None:
            continue
        indexes = range(topic.partitions) if partitions is None else \
            [p for p in partitions if 0 <= p < topic.partitions]
        topics.append(build(topic_type, name=name, partitions=tuple(
            build(part_type, partition_index=i32(p),
                  partition_size=i64(segment_bytes(topic.partition(p).path)),
                  offset_lag=i64(0), is_future_key=False)
            for p in indexes)))
    root = os.path.abspath(ctx.broker.root)
    volume = os.statvfs(root)
    result = build(result_type, error_code=ErrorCode.none, log_dir=root,
                   topics=tuple(topics), total_bytes=i64(volume.f_blocks * volume.f_frsize),
                   usable_bytes=i64(volume.f_bavail * volume.f_frsize))
    return build(ctx.response_type, throttle_time=i32Timedelta.parse(timedelta(0)),
                 error_code=ErrorCode.none, results=(result,))


def segment_bytes(directory: str) -> int:
    """The bytes of a partition's local segment files (layout.list_segments: leftovers
    not counted; 0 for a directory gone meanwhile)."""
    try:
        return sum(s.log_size for s in list_segments(directory))
    except FileNotFoundError:  # (a topic deleted between the lookup and the listing)
        return 0


APIS = [Api(DESCRIBE_LOG_DIRS_KEY, 1, 4, handle_describe_log_dirs, name="DescribeLogDirs")]
