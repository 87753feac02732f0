"""OffsetCommit (8) and OffsetFetch (9): a group's committed offsets, durable when the
commit is answered, kept as the engine's group positions (groups/offsets.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ..dispatcher import Api, RequestContext
from ..responses import build, entry_type

NO_THROTTLE = timedelta(0)


def _membership_error(ctx: RequestContext, request: Any) -> ErrorCode:
    """Kafka's checks of a commit's member and generation (classic groups), or member
    epoch (KIP-848 groups); a commit with neither, from a consumer that assigns its own
    partitions or an admin client, needs a group without members."""
    generation = getattr(request, "generation_id_or_member_epoch",
                         getattr(request, "generation_id", -1))
    member_id = getattr(request, "member_id", "")
    by_epoch = ctx.broker.consumer_groups.commit_error(  # a KIP-848 group: member epochs
        request.group_id, member_id, generation,
        [(t.name, p.partition_index) for t in request.topics for p in t.partitions])
    if by_epoch is not None:
        return by_epoch
    return ctx.broker.groups.commit_error(request.group_id, member_id,
                                          getattr(request, "group_instance_id", None),
                                          generation)


async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    refused = _membership_error(ctx, request)
    topic_entry = entry_type(ctx.response_type, "topics")
    part_entry = entry_type(topic_entry, "partitions")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            error = refused if refused != ErrorCode.none else await ctx.broker.offsets.commit(
                request.group_id, t.name, p.partition_index, p.committed_offset)
            parts.append(build(part_entry, partition_index=p.partition_index, error_code=error))
        topics.append(build(topic_entry, name=t.name, partitions=tuple(parts)))
    return build(ctx.response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _fetch_topics(ctx: RequestContext, response_cls: type, group: str,
                  topics: Any) -> tuple:
    topic_entry = entry_type(response_cls, "topics")
    part_entry = entry_type(topic_entry, "partitions")
    if topics is None:  # every partition the group has a position on
        wanted = [(name, list(range(topic.partitions))) for name in ctx.broker.topics.names()
                  if (topic := ctx.broker.topics.get(name)) is not None]
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in topics]
    out = []
    for name, indexes in wanted:
        parts = []
        for i in indexes:
            offset, error = ctx.broker.offsets.fetch(group, name, i)
            if topics is None and offset < 0:
                continue
            parts.append(build(part_entry, partition_index=i, committed_offset=offset,
                               committed_leader_epoch=-1, metadata="", error_code=error))
        if parts or topics is not None:
            out.append(build(topic_entry, name=name, partitions=tuple(parts)))
    return tuple(out)


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    groups = getattr(request, "groups", None)
    if groups is not None:  # v8+: a batch of groups
        entry = entry_type(ctx.response_type, "groups")
        answers = []
        for g in groups:
            error = ctx.broker.consumer_groups.fetch_error(
                g.group_id, getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            answers.append(build(entry, group_id=g.group_id, error_code=error, topics=(
                _fetch_topics(ctx, entry, g.group_id, g.topics)
                if error == ErrorCode.none else ())))
        return build(ctx.response_type, throttle_time=NO_THROTTLE, groups=tuple(answers))
    return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 topics=_fetch_topics(ctx, ctx.response_type, request.group_id,
                                      request.topics))


APIS = [
    Api(8, 2, 9, handle_offset_commit, name="OffsetCommit"),
    Api(9, 1, 9, handle_offset_fetch, name="OffsetFetch"),
]
