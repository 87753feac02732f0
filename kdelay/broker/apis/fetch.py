"""Fetch (key 1), v4..v16: batches from each partition's served form (served.py: delivery
offsets on a delayed topic, log offsets on a plain one), as raw v2 batches whose headers
were rewritten, with the high watermark and log start of each partition.

Sessionless only: every answer has session_id 0, so clients keep sending full requests
(Kafka's answer when it has no room for a session). v13+ names topics by id.
A fetch that finds less than min_bytes waits on the loop (fetch_wait.py) until a partition
it reads may have more, or max_wait passes.
Cost: per partition a view extension and a read (per batch served); kio's encode.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from functools import cache, partial
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import Records, i32, i32Timedelta, i64

from ...errors import CorruptLogError, OffsetOutOfRangeError
from ..dispatcher import Api, RequestContext
from ..fetch_wait import wait_any
from ..record_parts import RecordParts
from ..responses import build, entry_type
from ..view_file import ViewDamagedError

FETCH_KEY = 1
_EMPTY = Records(b"")


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    deadline = time.monotonic() + request.max_wait.total_seconds()
    while True:
        topics, total, read = _answer(ctx, request)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not read:
            break
        await wait_any([s.wakeups for s in read], partial(_next_due_ms, read), remaining)
    return build(ctx.response_type, throttle_time=i32Timedelta.parse(timedelta(0)),
                 error_code=ErrorCode.none, session_id=i32(0), responses=tuple(topics),
                 node_endpoints=())


def _next_due_ms(read: list) -> int | None:
    """ms until the first of the partitions `read` may have a record come due."""
    dues = [d for d in (s.partition.next_due_ms() for s in read) if d is not None]
    return min(dues, default=None)


def _answer(ctx: RequestContext, request: Any) -> tuple[list, int, list]:
    """(topic responses, bytes of records, the partitions read without error) for one
    look at every partition."""
    state = ctx.broker
    topic_type = entry_type(ctx.response_type, "responses")
    part_type = entry_type(topic_type, "partitions")
    by_id = ctx.api_version >= 13
    budget = request.max_bytes
    total = 0
    read = []
    out = []
    for t in request.topics:
        name = state.topics.by_id(t.topic_id) if by_id else t.topic
        parts = []
        for p in t.partitions:
            try:
                served = None if name is None else state.served.get(name, p.partition)
            except ViewDamagedError:  # refused: never a record at a wrong offset
                parts.append(_partition(part_type, p.partition,
                                        ErrorCode.kafka_storage_error, -1, -1, _EMPTY))
                continue
            if served is None:  # an id no topic has, else a topic or partition missing
                error = ErrorCode.unknown_topic_id if by_id and name is None else \
                    ErrorCode.unknown_topic_or_partition
                parts.append(_partition(part_type, p.partition, error, -1, -1, _EMPTY))
                continue
            sp = served.partition
            records: Records | RecordParts = _EMPTY
            error = ErrorCode.none
            try:
                sp.extend()
                if budget > 0:
                    # kio writes it as any buffer; the frame keeps its parts (protocol.py)
                    records = sp.read(p.fetch_offset, min(p.partition_max_bytes, budget))
                hw, start = sp.high_watermark, sp.log_start
            except OffsetOutOfRangeError:
                error = ErrorCode.offset_out_of_range
                hw, start = sp.high_watermark, sp.log_start
            except (ViewDamagedError, CorruptLogError):
                error, hw, start = ErrorCode.kafka_storage_error, -1, -1
            budget -= len(records)
            total += len(records)
            if error == ErrorCode.none:
                read.append(served)
            parts.append(_partition(part_type, p.partition, error, hw, start, records))
        out.append(build(topic_type, topic=t.topic if not by_id else None,
                         topic_id=t.topic_id if by_id else None, partitions=tuple(parts)))
    return out, total, read


def _partition(cls: type, index: int, error: ErrorCode, hw: int, start: int,
               records: Records | RecordParts) -> Any:
    return build(cls, partition_index=i32(index), error_code=error,
                 high_watermark=i64(hw), last_stable_offset=i64(hw),
                 log_start_offset=i64(start), diverging_epoch=_default(cls, "diverging_epoch"),
                 current_leader=_default(cls, "current_leader"),
                 snapshot_id=_default(cls, "snapshot_id"), aborted_transactions=None,
                 preferred_read_replica=BrokerId(-1), records=records)


@cache
def _default(cls: type, name: str) -> Any:
    """The "none" value of a nested field Kafka leaves at its defaults (all -1); cached
    per class (kio's messages are frozen: one instance serves every response)."""
    if name not in cls.__dataclass_fields__:  # type: ignore[attr-defined]
        return None
    nested = entry_type(cls, name)
    return nested(**{f.name: -1 for f in dataclasses.fields(nested)})


APIS = [Api(FETCH_KEY, 4, 16, handle_fetch, name="Fetch")]
