"""Metadata (key 3), v1..v13, minimal: the served topics, their partitions (node 0 leads
them all) and topic ids (topic_ids.py). No auto-creation: an unknown topic is answered
UNKNOWN_TOPIC_OR_PARTITION. Written so that the Fetch and ListOffsets tests have clients
that bootstrap; the topics session's full Metadata replaces this module."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i32Timedelta

from ..dispatcher import Api, RequestContext
from ..responses import build, entry_type
from ..state import NODE_ID

METADATA_KEY = 3
CLUSTER_ID = "kdelay"


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    state = ctx.broker
    rt = ctx.response_type
    broker_type = entry_type(rt, "brokers")
    topic_type = entry_type(rt, "topics")
    part_type = entry_type(topic_type, "partitions")
    host, port = state.advertised
    node = BrokerId(NODE_ID)
    wanted = state.topics.names() if request.topics is None else [t.name for t in
                                                                  request.topics]
    topics = []
    for name in wanted:
        topic = state.topics.get(name) if name is not None else None
        parts = () if topic is None else tuple(
            build(part_type, error_code=ErrorCode.none, partition_index=i32(i),
                  leader_id=node, leader_epoch=i32(0), replica_nodes=(node,),
                  isr_nodes=(node,), offline_replicas=())
            for i in range(topic.partitions))
        error = ErrorCode.none if topic is not None else ErrorCode.unknown_topic_or_partition
        topics.append(build(topic_type, error_code=error, name=name,
                            topic_id=state.topic_ids.id_of(name) if name else None,
                            is_internal=False, partitions=parts,
                            topic_authorized_operations=i32(-2147483648)))
    return build(rt, throttle_time=i32Timedelta.parse(timedelta(0)),
                 brokers=(build(broker_type, node_id=node, host=host, port=i32(port),
                                rack=None),),
                 cluster_id=CLUSTER_ID, controller_id=node, topics=tuple(topics),
                 cluster_authorized_operations=i32(-2147483648), error_code=ErrorCode.none)


APIS = [Api(METADATA_KEY, 1, 13, handle_metadata, name="Metadata")]
