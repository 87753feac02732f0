"""Share groups on the wire: ShareGroupHeartbeat (76), ShareFetch (78), ShareAcknowledge (79),
v1 as confluent-kafka's ShareConsumer sends them. The state is groups/share.py's (kdelay's
queue groups); this module translates: topic ids, share sessions, acknowledgement batches,
and acquired records sent as the stored batches that hold them (v2, at their log offsets)
with (first, last, delivery count) ranges beside them."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import InvalidConfigError
from ..batch_rewrite import v2_batches
from ..dispatcher import Api, RequestContext
from ..fetch_wait import wait_any
from ..groups.share import ShareGroups, ShareMember
from ..groups.share_configs import SPECS as GROUP_SPECS
from ..responses import element, make
from ..state import NODE_ID
from .configs import GROUP, ConfigEntry, ConfigRefused, ConfigResource, register

_FINAL_EPOCH = -1


def _shares(ctx: RequestContext) -> ShareGroups:
    return ctx.broker.share_groups


async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    shares = _shares(ctx)
    error, member = shares.heartbeat(request.group_id, request.member_id,
                                     request.member_epoch,
                                     list(request.subscribed_topic_names)
                                     if request.subscribed_topic_names is not None else None)
    interval = timedelta(milliseconds=shares.heartbeat_interval_ms)
    if member is None:
        return make(ctx.response_type, error_code=error, member_id=request.member_id,
                    member_epoch=-1 if error == ErrorCode.none else request.member_epoch,
                    heartbeat_interval=interval, assignment=None)
    assignment_type = element(ctx.response_type, "assignment")
    tp_type = element(assignment_type, "topic_partitions")
    parts = tuple(make(tp_type, topic_id=ctx.broker.topics.topic_id(name), partitions=p)
                  for name, p in shares.assignment(member))
    return make(ctx.response_type, member_id=member.member_id, member_epoch=member.epoch,
                heartbeat_interval=interval,
                assignment=make(assignment_type, topic_partitions=parts))


def _acks(ctx: RequestContext, group: str, member: ShareMember, topics: Any
          ) -> dict[tuple[str, int], ErrorCode]:
    """Apply the acknowledgement batches of a ShareFetch or ShareAcknowledge."""
    out: dict[tuple[str, int], ErrorCode] = {}
    for t in topics:
        name = ctx.broker.topics.by_id(t.topic_id)
        for p in t.partitions:
            batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                       for b in p.acknowledgement_batches]
            if not batches:
                continue
            if name is None:
                out[(str(t.topic_id), p.partition_index)] = ErrorCode.unknown_topic_id
                continue
            out[(name, p.partition_index)] = _shares(ctx).acknowledge(
                group, member, name, p.partition_index, batches)
    return out


def _records(log: Any, recs: list) -> tuple[bytearray, list[tuple[int, int, int]]]:
    """The stored batches holding `recs` (v2, at their log offsets), and the acquired
    ranges (first, last, delivery count) of consecutive offsets."""
    recs = sorted(recs, key=lambda r: r.offset)
    parts: list[tuple[bytes, int | None]] = []
    covered = -1  # the last offset of the batches taken so far
    for r in recs:
        if r.offset <= covered:
            continue
        for data in log.reads.batches_from(r.offset, 1):
            base = int.from_bytes(data[:8], "big")
            last = base + int.from_bytes(data[23:27], "big")
            if base > r.offset:
                break
            parts.append((data, base))
            covered = last
            break
    ranges: list[tuple[int, int, int]] = []
    for r in recs:
        if ranges and ranges[-1][1] == r.offset - 1 and ranges[-1][2] == r.delivery_count:
            ranges[-1] = (ranges[-1][0], r.offset, r.delivery_count)
        else:
            ranges.append((r.offset, r.offset, r.delivery_count))
    return v2_batches(parts), ranges


async def handle_share_fetch(ctx: RequestContext, request: Any) -> Any:
    shares = _shares(ctx)
    group = request.group_id or ""
    member = shares.member(group, request.member_id or "")
    if member is None:
        return make(ctx.response_type, error_code=ErrorCode.unknown_member_id,
                    acquisition_lock_timeout=timedelta(0), responses=())
    if request.share_session_epoch == 0:
        member.session, member.session_open = set(), True
    for t in request.topics:
        name = ctx.broker.topics.by_id(t.topic_id)
        if name is not None:
            member.session |= {(name, p.partition_index) for p in t.partitions}
    for t in request.forgotten_topics_data:
        name = ctx.broker.topics.by_id(t.topic_id)
        member.session -= {(name, p) for p in t.partitions}
    ack_errors = _acks(ctx, group, member, request.topics)
    if request.share_session_epoch == _FINAL_EPOCH:
        shares.session_closed(group, member)
    cfg = shares.configs.configs(group)
    acquired: dict = {}
    if request.share_session_epoch != _FINAL_EPOCH:
        budget = max(1, request.max_records or 500)
        deadline = time.monotonic() + request.max_wait.total_seconds()
        while True:
            acquired = shares.acquire(group, member, budget)
            remaining = deadline - time.monotonic()
            if acquired or remaining <= 0 or ctx.connection.closing:
                break
            wakeups = [s.wakeups for name, p in member.session
                       if (s := ctx.broker.served.get(name, p)) is not None]
            await wait_any(wakeups, lambda: _next_due_ms(member), remaining)
    host, port = ctx.broker.advertised
    topic_type = element(ctx.response_type, "responses")
    part_type = element(topic_type, "partitions")
    range_type = element(part_type, "acquired_records")
    leader_type = element(part_type, "current_leader")
    leader = make(leader_type, leader_id=NODE_ID, leader_epoch=0)
    by_topic: dict[str, list] = {}
    for name, p in sorted(member.session | set(ack_errors)):
        recs = acquired.get((name, p), [])
        topic = ctx.broker.topics.get(name) if recs else None
        records, ranges = _records(topic.partition(p), recs) \
            if topic is not None else (None, [])
        ack_error = ack_errors.get((name, p), ErrorCode.none)
        by_topic.setdefault(name, []).append(make(
            part_type, partition_index=p, acknowledge_error_code=ack_error.value,
            acknowledge_error_message=None, current_leader=leader,
            records=bytes(records) if records is not None else b"",
            acquired_records=tuple(make(range_type, first_offset=a, last_offset=b,
                                        delivery_count=c) for a, b, c in ranges)))
    node_type = element(ctx.response_type, "node_endpoints")
    return make(ctx.response_type, acquisition_lock_timeout=timedelta(milliseconds=cfg.lock_ms),
                responses=tuple(make(topic_type, topic_id=ctx.broker.topics.topic_id(n),
                                     partitions=tuple(ps)) for n, ps in by_topic.items()),
                node_endpoints=(make(node_type, node_id=NODE_ID, host=host, port=port,
                                     rack=None),))


def _next_due_ms(member: ShareMember) -> int | None:
    """When a delayed release, a lock expiry or a pending record next comes due."""
    dues = [d for qc in member.consumers.values() if (d := qc._next_due_ms()) is not None]
    return min(dues) if dues else None


async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    shares = _shares(ctx)
    group = request.group_id or ""
    member = shares.member(group, request.member_id or "")
    if member is None:
        return make(ctx.response_type, error_code=ErrorCode.unknown_member_id, responses=())
    ack_errors = _acks(ctx, group, member, request.topics)
    if request.share_session_epoch == _FINAL_EPOCH:
        member.session = set()
        shares.session_closed(group, member)
    topic_type = element(ctx.response_type, "responses")
    part_type = element(topic_type, "partitions")
    leader_type = element(part_type, "current_leader")
    leader = make(leader_type, leader_id=NODE_ID, leader_epoch=0)
    by_topic: dict[str, list] = {}
    for (name, p), error in sorted(ack_errors.items()):
        by_topic.setdefault(name, []).append(make(part_type, partition_index=p,
                                                  error_code=error, current_leader=leader))
    host, port = ctx.broker.advertised
    node_type = element(ctx.response_type, "node_endpoints")
    return make(ctx.response_type,
                responses=tuple(make(topic_type, topic_id=ctx.broker.topics.topic_id(n),
                                     partitions=tuple(ps)) for n, ps in by_topic.items()),
                node_endpoints=(make(node_type, node_id=NODE_ID, host=host, port=port,
                                     rack=None),))


APIS = [
    Api(76, 1, 1, handle_share_group_heartbeat, name="ShareGroupHeartbeat"),
    Api(78, 1, 1, handle_share_fetch, name="ShareFetch"),
    Api(79, 1, 1, handle_share_acknowledge, name="ShareAcknowledge"),
]


# ---------------------------------------------------------------------------- group configs

def describe_group(broker: Any, name: str, keys: list[str] | None) -> list[ConfigEntry]:
    store = broker.share_groups.configs
    out = []
    for key in (keys if keys is not None else list(GROUP_SPECS)):
        spec = GROUP_SPECS.get(key)
        if spec is not None:
            value, source = store.text(name, key)
            out.append(ConfigEntry(key, value, source, spec.config_type, spec.doc))
    return out


def alter_group(broker: Any, name: str, changes: dict[str, str | None],
                validate_only: bool) -> None:
    try:
        broker.share_groups.configs.alter(name, changes, validate_only)
    except InvalidConfigError as e:
        raise ConfigRefused(ErrorCode.invalid_config, str(e)) from None


register(GROUP, ConfigResource(describe_group, alter_group))
