"""The classic group protocol: FindCoordinator (10), JoinGroup (11), Heartbeat (12),
LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42). The state machine is
groups/coordinator.py; these handlers translate requests of every version the clients send.
The broker is every group's coordinator (node 0 at the advertised listener)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KdelayError
from ..dispatcher import Api, RequestContext
from ..groups.consumer_protocol import ASSIGNOR, ConsumerGroup
from ..groups.coordinator import EMPTY, GroupCoordinator, JoinAnswer
from ..responses import build, entry_type
from ..state import NODE_ID

NO_THROTTLE = timedelta(0)


def _ms(value: Any) -> int:
    """A kio duration (timedelta) or an int, in ms."""
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    host, port = ctx.broker.advertised
    key_type = getattr(request, "key_type", 0)
    error = ErrorCode.none if key_type == 0 or key_type == 2 else \
        ErrorCode.coordinator_not_available  # transactions are not supported
    keys = getattr(request, "coordinator_keys", None)
    if keys is not None:  # v4+: a batch of keys
        entry = entry_type(ctx.response_type, "coordinators")
        coordinators = tuple(build(entry, key=k, node_id=NODE_ID, host=host, port=port,
                                   error_code=error, error_message=None) for k in keys)
        return build(ctx.response_type, throttle_time=NO_THROTTLE, coordinators=coordinators)
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=error,
                 error_message=None, node_id=NODE_ID, host=host, port=port)


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.broker.groups


async def _answered(start: Callable[[Callable[[Any], None]], None]) -> Any:
    """Run one coordinator call and wait for the answer it gives through its callback
    (at once, or when the rebalance it waits for completes)."""
    done = asyncio.get_running_loop().create_future()

    def reply(answer: Any) -> None:
        if not done.done():  # the connection may have gone meanwhile
            done.set_result(answer)

    start(reply)
    return await done


async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    if ctx.broker.consumer_groups.has_members(request.group_id):
        return build(ctx.response_type, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.inconsistent_group_protocol, generation_id=-1,
                     protocol_type=request.protocol_type, protocol_name="", leader="",
                     skip_assignment=False, member_id=request.member_id, members=())
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(getattr(request, "rebalance_timeout", request.session_timeout))
    answer: JoinAnswer = await _answered(lambda reply: _coordinator(ctx).join(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.protocol_type, [(p.name, p.metadata) for p in request.protocols],
        session_ms, rebalance_ms, ctx.header.client_id or "", ctx.connection.peer, reply))
    entry = entry_type(ctx.response_type, "members")
    members = tuple(build(entry, member_id=m, group_instance_id=i, metadata=md)
                    for m, i, md in answer.members)
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=answer.error,
                 generation_id=answer.generation, protocol_type=request.protocol_type,
                 protocol_name=answer.protocol_name or "", leader=answer.leader,
                 skip_assignment=answer.skip_assignment,
                 member_id=answer.member_id or request.member_id, members=members)


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    assignments = {a.member_id: a.assignment for a in request.assignments}
    error, assignment = await _answered(lambda reply: _coordinator(ctx).sync(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), assignments, reply,
        getattr(request, "protocol_type", None), getattr(request, "protocol_name", None)))
    group = ctx.broker.groups.groups.get(request.group_id)
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=error,
                 protocol_type=group.protocol_type if group else None,
                 protocol_name=group.protocol_name if group else None, assignment=assignment)


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    error = _coordinator(ctx).heartbeat(request.group_id, request.generation_id,
                                        request.member_id,
                                        getattr(request, "group_instance_id", None))
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    coordinator = _coordinator(ctx)
    members = getattr(request, "members", None)
    if members is None:  # v0-2: one member
        error = coordinator.leave(request.group_id, request.member_id, None)
        return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=error)
    entry = entry_type(ctx.response_type, "members")
    answers = tuple(build(entry, member_id=m.member_id, group_instance_id=m.group_instance_id,
                          error_code=coordinator.leave(request.group_id, m.member_id,
                                                       m.group_instance_id))
                    for m in members)
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 members=answers)


def _listed(ctx: RequestContext) -> list[tuple[str, str, str, str]]:
    """(group id, protocol type, state, type) of every group: the classic, KIP-848 and
    share groups with members, and the groups with none that have committed offsets
    (Empty)."""
    classic, consumer = _coordinator(ctx).groups, ctx.broker.consumer_groups.groups
    found = [(g.group_id, g.protocol_type or "", g.state, "classic")
             for g in classic.values()]
    found += [(g.group_id, "consumer", g.state, "consumer") for g in consumer.values()
              if g.group_id not in classic]
    found += [(gid, "share", "Stable", "share")
              for gid, members in ctx.broker.share_groups.groups.items() if members]
    with_members = {gid for gid, _, _, _ in found}
    found += [(gid, "consumer", EMPTY, "classic")
              for gid in sorted(ctx.broker.offsets.groups(ctx.broker.topics) - with_members)]
    return found


async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {s.lower() for s in getattr(request, "types_filter", ())}
    entry = entry_type(ctx.response_type, "groups")
    groups = tuple(build(entry, group_id=gid, protocol_type=ptype, group_state=state,
                         group_type=gtype)
                   for gid, ptype, state, gtype in _listed(ctx)
                   if (not wanted or state.lower() in wanted)
                   and (not types or gtype in types))
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 groups=groups)


async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    entry = entry_type(ctx.response_type, "groups")
    member_entry = entry_type(entry, "members")
    out = []
    for group_id in request.groups:
        cg = ctx.broker.consumer_groups.groups.get(group_id)
        if cg is not None and group_id not in _coordinator(ctx).groups:
            out.append(_describe_consumer_group(entry, member_entry, cg))
            continue
        g = _coordinator(ctx).groups.get(group_id)
        if g is None:  # no members: Empty if it has committed offsets, else unknown
            known = ctx.broker.offsets.has_offsets(group_id, ctx.broker.topics)
            out.append(build(entry, error_code=ErrorCode.none, error_message=None,
                             group_id=group_id, group_state=EMPTY if known else "Dead",
                             protocol_type="consumer" if known else "", protocol_data="",
                             members=(), authorized_operations=-2147483648))
            continue
        members = tuple(
            build(member_entry, member_id=m.member_id, group_instance_id=m.instance_id,
                  client_id=m.client_id, client_host=m.client_host,
                  member_metadata=m.metadata_for(g.protocol_name) if g.protocol_name else b"",
                  member_assignment=m.assignment)
            for m in g.members.values())
        out.append(build(entry, error_code=ErrorCode.none, error_message=None,
                         group_id=group_id, group_state=g.state,
                         protocol_type=g.protocol_type or "",
                         protocol_data=g.protocol_name or "", members=members,
                         authorized_operations=-2147483648))
    return build(ctx.response_type, throttle_time=NO_THROTTLE, groups=tuple(out))


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    """Kafka's DeleteGroups: a group with members (classic, KIP-848 or share) is refused
    with NON_EMPTY_GROUP; one with committed offsets loses them on every partition (the
    in-process `Consumer` of the group starts over with them); one with neither is
    GROUP_ID_NOT_FOUND. Share groups' acknowledgement state is not deleted here."""
    entry = entry_type(ctx.response_type, "results")
    results = []
    for group_id in request.groups_names:
        classic = _coordinator(ctx).groups.get(group_id)
        if (classic is not None and classic.members) or \
                ctx.broker.consumer_groups.has_members(group_id) or \
                ctx.broker.share_groups.groups.get(group_id):
            error = ErrorCode.non_empty_group
        else:
            try:
                had = await ctx.broker.offsets.delete(group_id, ctx.broker.topics)
            except KdelayError:
                error = ErrorCode.unknown_server_error
            else:
                # (a classic group without members is not kept: coordinator.py)
                error = ErrorCode.none if had else ErrorCode.group_id_not_found
        results.append(build(entry, group_id=group_id, error_code=error))
    return build(ctx.response_type, throttle_time=NO_THROTTLE, results=tuple(results))


def _describe_consumer_group(entry: type, member_entry: type, g: ConsumerGroup) -> Any:
    """A consumer-protocol group as DescribeGroups shows it (as Kafka does): members'
    subscriptions and assignments in the classic consumer protocol's encoding."""
    members = tuple(build(member_entry, member_id=m.member_id, group_instance_id=m.instance_id,
                          client_id=m.client_id, client_host=m.client_host,
                          member_metadata=_subscription_bytes(m.topics),
                          member_assignment=_assignment_bytes(m.assigned))
                    for m in g.members.values())
    return build(entry, error_code=ErrorCode.none, error_message=None, group_id=g.group_id,
                 group_state=g.state, protocol_type="consumer", protocol_data=ASSIGNOR,
                 members=members, authorized_operations=-2147483648)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _subscription_bytes(topics: tuple[str, ...]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    return (struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics)
            + struct.pack(">i", -1))


def _assignment_bytes(partitions: set[tuple[str, int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, (topic, partitions)..., null user data."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, ps in by_topic.items():
        out.append(_string(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    return b"".join(out) + struct.pack(">i", -1)


APIS = [
    Api(10, 0, 6, handle_find_coordinator, name="FindCoordinator"),
    Api(11, 0, 7, handle_join_group, name="JoinGroup"),
    Api(12, 0, 4, handle_heartbeat, name="Heartbeat"),
    Api(13, 0, 5, handle_leave_group, name="LeaveGroup"),
    Api(14, 0, 5, handle_sync_group, name="SyncGroup"),
    Api(15, 0, 5, handle_describe_groups, name="DescribeGroups"),
    Api(16, 0, 5, handle_list_groups, name="ListGroups"),
    Api(42, 0, 2, handle_delete_groups, name="DeleteGroups"),
]
