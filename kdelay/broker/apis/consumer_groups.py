"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), KIP-848's consumer group
protocol, v0-1 (confluent-kafka sends v1 with `group.protocol=consumer`, and describes
groups with ConsumerGroupDescribe first). The state machine and the broker-side assignor are
groups/consumer_protocol.py; this module translates topic ids and the request's "unchanged"
(null) fields. A group id is either a classic group or a consumer-protocol group while it
has members: the other protocol is refused (GROUP_ID_NOT_FOUND here, as Kafka answers, and
INCONSISTENT_GROUP_PROTOCOL from JoinGroup)."""

from __future__ import annotations

import typing
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ..dispatcher import Api, RequestContext
from ..groups.consumer_protocol import ASSIGNOR, HeartbeatAnswer, partitions_by_topic
from ..responses import element, make


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def _owned(ctx: RequestContext, topics: Any) -> set[tuple[str, int]] | None:
    if topics is None:
        return None
    out: set[tuple[str, int]] = set()
    for t in topics:
        name = ctx.broker.topics.by_id(t.topic_id)
        if name is not None:  # a deleted topic's partitions are owned by nobody now
            out.update((name, p) for p in t.partitions)
    return out


def _answer(ctx: RequestContext, request: Any) -> HeartbeatAnswer:
    if ctx.broker.groups.groups.get(request.group_id) is not None and \
            ctx.broker.groups.groups[request.group_id].members:
        return HeartbeatAnswer(ErrorCode.group_id_not_found,
                               message=f"group {request.group_id} is a classic group")
    if request.subscribed_topic_regex:
        return HeartbeatAnswer(ErrorCode.invalid_request,
                               message="regular expression subscriptions are not supported")
    if request.server_assignor not in (None, ASSIGNOR):
        return HeartbeatAnswer(ErrorCode.unsupported_assignor,
                               message=f"the broker assigns with {ASSIGNOR!r} only")
    return ctx.broker.consumer_groups.heartbeat(
        request.group_id, request.member_id, request.member_epoch,
        getattr(request, "instance_id", None), _ms(request.rebalance_timeout),
        request.subscribed_topic_names, _owned(ctx, request.topic_partitions),
        ctx.header.client_id or "", ctx.connection.peer)


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    answer = _answer(ctx, request)
    interval = timedelta(milliseconds=ctx.broker.consumer_groups.heartbeat_interval_ms)
    member = answer.member
    if answer.error != ErrorCode.none or member is None:
        return make(ctx.response_type, error_code=answer.error,
                    error_message=answer.message, member_id=request.member_id or None,
                    member_epoch=request.member_epoch, heartbeat_interval=interval,
                    assignment=None)
    if request.member_epoch < 0:  # left
        return make(ctx.response_type, member_id=member.member_id,
                    member_epoch=request.member_epoch, heartbeat_interval=interval,
                    assignment=None)
    assignment = None
    if answer.assignment is not None:
        assignment_type = element(ctx.response_type, "assignment")
        tp_type = element(assignment_type, "topic_partitions")
        assignment = make(assignment_type, topic_partitions=tuple(
            make(tp_type, topic_id=ctx.broker.topics.topic_id(name), partitions=tuple(parts))
            for name, parts in answer.assignment))
    return make(ctx.response_type, member_id=member.member_id, member_epoch=member.epoch,
                heartbeat_interval=interval, assignment=assignment)


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    """ConsumerGroupDescribe (69): KIP-848 groups with their epochs, members, current and
    target assignments. Any other group id is GROUP_ID_NOT_FOUND, as Kafka answers for a
    classic group (clients then ask DescribeGroups). O(the groups' members and partitions)."""
    group_type = element(ctx.response_type, "groups")
    member_type = element(group_type, "members")
    described = []
    for group_id in request.group_ids:
        g = ctx.broker.consumer_groups.groups.get(group_id)
        if g is None or group_id in ctx.broker.groups.groups:
            described.append(make(
                group_type, error_code=ErrorCode.group_id_not_found,
                error_message=f"group {group_id} is not a consumer-protocol group",
                group_id=group_id, group_state="Dead", group_epoch=-1, assignment_epoch=-1,
                assignor_name="", members=(), authorized_operations=-2147483648))
            continue
        members = tuple(make(
            member_type, member_id=m.member_id, instance_id=m.instance_id, rack_id=None,
            member_epoch=m.epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=m.topics, subscribed_topic_regex=None,
            assignment=_assignment(ctx, member_type, m.assigned),
            target_assignment=_assignment(ctx, member_type, g.target.get(m.member_id, ())),
            member_type=1)  # 1: a member of the consumer protocol (not a classic one)
            for m in g.members.values())
        described.append(make(
            group_type, group_id=group_id, group_state=g.state, group_epoch=g.epoch,
            assignment_epoch=g.target_epoch, assignor_name=ASSIGNOR, members=members,
            authorized_operations=-2147483648))
    return make(ctx.response_type, groups=tuple(described))


def _assignment(ctx: RequestContext, member_type: type, partitions: Any) -> Any:
    assignment_type = typing.get_type_hints(member_type)["assignment"]
    tp_type = element(assignment_type, "topic_partitions")
    return make(assignment_type, topic_partitions=tuple(
        make(tp_type, topic_id=ctx.broker.topics.topic_id(name), topic_name=name,
             partitions=tuple(parts))
        for name, parts in partitions_by_topic(partitions)))


APIS = [
    Api(68, 0, 1, handle_consumer_group_heartbeat, name="ConsumerGroupHeartbeat"),
    Api(69, 0, 1, handle_consumer_group_describe, name="ConsumerGroupDescribe"),
]
