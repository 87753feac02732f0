"""CreateTopics (key 19, v2..v7), DeleteTopics (key 20, v1..v6) and CreatePartitions
(key 37, v0..v3; more partitions only). Each topic of a request is answered on its own:
one refused topic changes nothing of itself and leaves the others unaffected.

Replication factors and replica assignments: the broker is the only node, so a factor of
-1 or 1 and assignments naming node 0 only are accepted, others are refused with
INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT.
Cost: topics.py's create, delete and add_partitions (a Log.open per new partition).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import InvalidConfigError, InvalidTopicError
from ..dispatcher import Api, RequestContext
from ..responses import element, has, make
from ..state import NODE_ID
from ..topic_configs import SPECS

log = logging.getLogger("kdelay.broker")

_NO_ID = uuid.UUID(int=0)


def _check_replicas(factor: int, assignments: tuple) -> tuple[ErrorCode, str] | None:
    if factor not in (-1, 1):
        return (ErrorCode.invalid_replication_factor,
                f"replication factor {factor}: this broker is a one-node cluster")
    for a in assignments:
        if tuple(a.broker_ids) != (NODE_ID,):
            return (ErrorCode.invalid_replica_assignment,
                    f"replica assignment {list(a.broker_ids)}: the only node is {NODE_ID}")
    return None


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.broker.topics
    result_cls = element(ctx.response_type, "topics")
    config_cls = element(result_cls, "configs") if has(result_cls, "configs") else None
    default_partitions = int(ctx.broker.settings.config("num.partitions"))
    results = []
    for t in request.topics:
        partitions = default_partitions if t.num_partitions == -1 else t.num_partitions
        configs = {c.name: c.value for c in t.configs}
        error, message, topic_id = ErrorCode.none, None, _NO_ID
        refused = _check_replicas(t.replication_factor, t.assignments)
        if t.assignments and t.num_partitions == -1:
            partitions = len(t.assignments)
        try:
            if refused is not None:
                error, message = refused
            elif any(v is None for v in configs.values()):
                raise InvalidConfigError(
                    f"config {next(k for k, v in configs.items() if v is None)} needs a value")
            elif request.validate_only:
                registry.check_new(t.name, partitions, configs)
            else:
                registry.create(t.name, partitions, configs)
                topic_id = registry.topic_id(t.name) or _NO_ID
                log.info("created topic %r with %d partitions", t.name, partitions)
        except InvalidConfigError as e:
            error, message = ErrorCode.invalid_config, str(e)
        except InvalidTopicError as e:
            exists = registry.get(t.name) is not None
            error = ErrorCode.topic_already_exists if exists else (
                ErrorCode.invalid_partitions if partitions < 1 else
                ErrorCode.invalid_topic_exception)
            message = str(e)
        described = ()
        if error == ErrorCode.none and config_cls is not None:
            shown = registry.configs(t.name)
            if shown is not None:
                described = tuple(make(config_cls, name=name, value=shown.text(name)[0],
                                       read_only=False, config_source=shown.text(name)[1],
                                       is_sensitive=False) for name in SPECS)
        results.append(make(result_cls, name=t.name, topic_id=topic_id, error_code=error,
                            error_message=message, topic_config_error_code=0,
                            num_partitions=partitions if error == ErrorCode.none else -1,
                            replication_factor=1 if error == ErrorCode.none else -1,
                            configs=described))
    return make(ctx.response_type, topics=tuple(results))


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.broker.topics
    result_cls = element(ctx.response_type, "responses")
    asked = getattr(request, "topics", None)
    if asked is None:  # v0..v5 name them in topic_names
        asked = [(name, None) for name in request.topic_names]
    else:
        asked = [(t.name, t.topic_id) for t in asked]
    results = []
    for name, topic_id in asked:
        if name is None and topic_id is not None:
            name = registry.by_id(topic_id)
            if name is None:
                results.append(make(result_cls, name=None, topic_id=topic_id,
                                    error_code=ErrorCode.unknown_topic_id,
                                    error_message=f"no topic with id {topic_id}"))
                continue
        found_id = registry.topic_id(name) if name is not None else None
        if name is None or registry.get(name) is None:
            results.append(make(result_cls, name=name, topic_id=topic_id or _NO_ID,
                                error_code=ErrorCode.unknown_topic_or_partition,
                                error_message=f"no topic {name!r}"))
            continue
        registry.delete(name)
        log.info("deleted topic %r", name)
        results.append(make(result_cls, name=name, topic_id=found_id or _NO_ID,
                            error_code=ErrorCode.none, error_message=None))
    return make(ctx.response_type, responses=tuple(results))


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.broker.topics
    result_cls = element(ctx.response_type, "results")
    results = []
    for t in request.topics:
        error, message = ErrorCode.none, None
        topic = registry.get(t.name)
        if topic is None:
            error, message = ErrorCode.unknown_topic_or_partition, f"no topic {t.name!r}"
        elif t.count <= topic.partitions:
            error = ErrorCode.invalid_partitions
            message = (f"topic {t.name!r} has {topic.partitions} partitions; it can only "
                       f"grow (asked for {t.count})")
        elif t.assignments and any(tuple(a.broker_ids) != (NODE_ID,) for a in t.assignments):
            error = ErrorCode.invalid_replica_assignment
            message = f"replica assignments may name node {NODE_ID} only"
        elif not request.validate_only:
            registry.add_partitions(t.name, t.count)
            log.info("topic %r grown to %d partitions", t.name, t.count)
        results.append(make(result_cls, name=t.name, error_code=error, error_message=message))
    return make(ctx.response_type, results=tuple(results))


APIS = [
    Api(19, 2, 7, handle_create_topics, name="CreateTopics"),
    Api(20, 1, 6, handle_delete_topics, name="DeleteTopics"),
    Api(37, 0, 3, handle_create_partitions, name="CreatePartitions"),
]
