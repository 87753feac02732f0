"""Metadata (key 3, v0..v13): the one-node cluster (node 0 at the advertised listener,
leader of every partition), the topics with their ids, and auto-creation of missing topics
(`num.partitions` partitions, as Kafka's auto.create.topics.enable; off with
`--config auto.create.topics.enable=false`).

Cost: O(topics asked for x their partitions) message objects; an auto-creation opens the
new topic's partitions.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName

from ...errors import InvalidConfigError, InvalidTopicError
from ..dispatcher import Api, RequestContext
from ..responses import element, has, make
from ..state import NODE_ID, BrokerState

log = logging.getLogger("kdelay.broker")

CLUSTER_ID = "kdelay"
_NO_ID = uuid.UUID(int=0)


def auto_create(broker: BrokerState, name: str) -> ErrorCode:
    """Create a missing topic with the broker's defaults, where auto-creation is on:
    none, or the error a client is to see for the name."""
    if not broker.settings.config("auto.create.topics.enable"):
        return ErrorCode.unknown_topic_or_partition
    partitions = int(broker.settings.config("num.partitions"))
    try:
        broker.topics.create(name, partitions)
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    except InvalidConfigError as e:  # the broker-wide defaults make no valid topic
        log.error("cannot auto-create topic %r: %s", name, e)
        return ErrorCode.invalid_config
    log.info("auto-created topic %r with %d partitions", name, partitions)
    return ErrorCode.none


def _partitions(topic_cls: type, count: int) -> tuple:
    part_cls = element(topic_cls, "partitions")
    leader = BrokerId(NODE_ID)
    return tuple(make(part_cls, error_code=ErrorCode.none, partition_index=i,
                      leader_id=leader, leader_epoch=0, replica_nodes=(leader,),
                      isr_nodes=(leader,), offline_replicas=())
                 for i in range(count))


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    registry = broker.topics
    resp_cls = ctx.response_type
    topic_cls = element(resp_cls, "topics")
    with_ids = has(topic_cls, "topic_id")
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    wanted = request.topics
    if wanted is None or (ctx.api_version == 0 and not wanted):  # every topic
        asked: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in registry.names()]
    else:
        asked = [(t.name, getattr(t, "topic_id", None)) for t in wanted]
    topics = []
    for name, topic_id in asked:
        error = ErrorCode.none
        if name is None:  # asked for by id only (v10+)
            name = registry.by_id(topic_id) if topic_id is not None else None
            if name is None:
                topics.append(make(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None,
                                   topic_id=topic_id or _NO_ID, is_internal=False,
                                   partitions=()))
                continue
        if registry.get(name) is None:
            error = auto_create(broker, name) if allow_auto else \
                ErrorCode.unknown_topic_or_partition
        topic = registry.get(name)
        if topic is None:
            topics.append(make(topic_cls, error_code=error, name=TopicName(name),
                               topic_id=_NO_ID, is_internal=False, partitions=()))
            continue
        topics.append(make(topic_cls, error_code=ErrorCode.none, name=TopicName(name),
                           topic_id=registry.topic_id(name) if with_ids else None,
                           is_internal=False,
                           partitions=_partitions(topic_cls, topic.partitions)))
    host, port = broker.advertised
    broker_cls = element(resp_cls, "brokers")
    return make(resp_cls, brokers=(make(broker_cls, node_id=BrokerId(NODE_ID), host=host,
                                        port=port, rack=None),),
                cluster_id=CLUSTER_ID, controller_id=BrokerId(NODE_ID), topics=tuple(topics))


APIS = [Api(3, 0, 13, handle_metadata, name="Metadata")]
