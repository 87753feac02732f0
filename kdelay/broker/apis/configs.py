"""DescribeConfigs (key 32, v1..v4) and IncrementalAlterConfigs (key 44, v0..v1), by
resource type.

Each resource type Kafka names (TOPIC 2, BROKER 4, GROUP 32) that the broker answers is a
`ConfigResource` in `RESOURCES`: how to describe one resource's configs and how to apply
changes to them. This module registers TOPIC and BROKER; another module registers GROUP
with `register(GROUP, ConfigResource(...))` (the group configs of share groups). A resource
type with no entry is answered with INVALID_REQUEST, changing nothing.

BROKER (node 0, the one broker) is described as the process started: its own configs
(settings.BROKER_CONFIGS) and the topic configs' broker-wide defaults given with
`--config`, all read-only; an alteration is refused (INVALID_REQUEST), as Kafka refuses
one of a config it cannot change while running.

An alteration is checked whole before anything changes: an unknown name, a bad value, an
APPEND/SUBTRACT (no topic config here is a list) or `cleanup.policy=compact` refuses the
resource with INVALID_CONFIG and a message naming the config, and nothing of it changes.
Cost: O(configs) per resource, plus what applying a change costs (topics.py: a topic
reopen when its LogConfig changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import InvalidConfigError, KdelayError
from ..dispatcher import Api, RequestContext
from ..responses import element, make
from ..settings import BROKER_CONFIGS
from ..state import NODE_ID, BrokerState
from ..topic_configs import SPECS

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class ConfigRefused(KdelayError):
    """A resource's describe or alter refused with a Kafka error code and a message."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int          # Kafka's ConfigSource: 1 topic, 4 static broker, 5 default, ...
    config_type: int     # Kafka's ConfigType (topic_configs.BOOLEAN, ...)
    documentation: str | None = None
    read_only: bool = False
    sensitive: bool = False


Describe = Callable[[BrokerState, str, "list[str] | None"], "list[ConfigEntry]"]
# (broker, resource name, {config: value or None for back to the default}, validate only)
Alter = Callable[[BrokerState, str, "dict[str, str | None]", bool], None]


@dataclass(frozen=True)
class ConfigResource:
    describe: Describe
    alter: Alter


RESOURCES: dict[int, ConfigResource] = {}


def register(resource_type: int, resource: ConfigResource) -> None:
    """Answer DescribeConfigs and IncrementalAlterConfigs for this resource type."""
    RESOURCES[resource_type] = resource


# ---------------------------------------------------------------------------- topics

def describe_topic(broker: BrokerState, name: str, keys: list[str] | None) -> list[ConfigEntry]:
    configs = broker.topics.configs(name)
    if configs is None:
        raise ConfigRefused(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
    out = []
    for key in (keys if keys is not None else list(SPECS)):
        spec = SPECS.get(key)
        if spec is None:
            continue  # as Kafka: names it does not know are left out
        value, source = configs.text(key)
        out.append(ConfigEntry(key, value, source, spec.config_type, spec.doc))
    return out


def alter_topic(broker: BrokerState, name: str, changes: dict[str, str | None],
                validate_only: bool) -> None:
    if broker.topics.get(name) is None:
        raise ConfigRefused(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
    try:
        if validate_only:
            broker.topics.check_alter(name, changes)
        else:
            broker.topics.alter(name, changes)
    except InvalidConfigError as e:
        raise ConfigRefused(ErrorCode.invalid_config, str(e)) from None


register(TOPIC, ConfigResource(describe_topic, alter_topic))


# ---------------------------------------------------------------------------- the broker

STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5  # Kafka's ConfigSource


def describe_broker(broker: BrokerState, name: str, keys: list[str] | None
                    ) -> list[ConfigEntry]:
    _this_broker(name)
    given = broker.settings.configs
    out = []
    for key, spec in BROKER_CONFIGS.items():
        if keys is None or key in keys:
            value = broker.settings.config(key)
            text = str(value).lower() if isinstance(value, bool) else str(value)
            out.append(ConfigEntry(key, text, STATIC_BROKER_CONFIG if key in given
                                   else DEFAULT_CONFIG, spec.config_type, spec.doc,
                                   read_only=True))
    for key, text in given.items():  # the topic configs' broker-wide defaults
        if key in SPECS and (keys is None or key in keys):
            out.append(ConfigEntry(key, text, STATIC_BROKER_CONFIG, SPECS[key].config_type,
                                   SPECS[key].doc, read_only=True))
    return out


def alter_broker(broker: BrokerState, name: str, changes: dict[str, str | None],
                 validate_only: bool) -> None:
    _this_broker(name)
    raise ConfigRefused(ErrorCode.invalid_request,
                        "the broker's configs are set with --config when it starts; none "
                        "changes while it runs")


def _this_broker(name: str) -> None:
    if name != str(NODE_ID):
        raise ConfigRefused(ErrorCode.invalid_request,
                            f"no broker {name!r}: this is broker {NODE_ID}, the only one")


register(BROKER, ConfigResource(describe_broker, alter_broker))


# ---------------------------------------------------------------------------- handlers

def _unknown_type(resource_type: int) -> ConfigRefused:
    return ConfigRefused(ErrorCode.invalid_request,
                         f"configs of resource type {resource_type} are not supported")


async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    result_cls = element(ctx.response_type, "results")
    entry_cls = element(result_cls, "configs")
    results = []
    for res in request.resources:
        keys = None if res.configuration_keys is None else list(res.configuration_keys)
        try:
            resource = RESOURCES.get(res.resource_type)
            if resource is None:
                raise _unknown_type(res.resource_type)
            entries = resource.describe(ctx.broker, res.resource_name, keys)
            code, message = ErrorCode.none, None
        except ConfigRefused as e:
            entries, code, message = [], e.code, str(e)
        configs = tuple(make(entry_cls, name=e.name, value=e.value, read_only=e.read_only,
                             config_source=e.source, is_sensitive=e.sensitive, synonyms=(),
                             config_type=e.config_type,
                             documentation=e.documentation if request_docs(request) else None)
                        for e in entries)
        results.append(make(result_cls, error_code=code, error_message=message,
                            resource_type=res.resource_type,
                            resource_name=res.resource_name, configs=configs))
    return make(ctx.response_type, results=tuple(results))


def request_docs(request: Any) -> bool:
    return bool(getattr(request, "include_documentation", False))


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    result_cls = element(ctx.response_type, "responses")
    results = []
    for res in request.resources:
        try:
            resource = RESOURCES.get(res.resource_type)
            if resource is None:
                raise _unknown_type(res.resource_type)
            changes: dict[str, str | None] = {}
            for c in res.configs:
                if c.config_operation == SET:
                    changes[c.name] = c.value
                elif c.config_operation == DELETE:
                    changes[c.name] = None
                else:
                    raise ConfigRefused(ErrorCode.invalid_config,
                                        f"config {c.name}: APPEND and SUBTRACT apply only to "
                                        f"list configs, and {c.name} is not one")
            resource.alter(ctx.broker, res.resource_name, changes, request.validate_only)
            code, message = ErrorCode.none, None
        except ConfigRefused as e:
            code, message = e.code, str(e)
        results.append(make(result_cls, error_code=code, error_message=message,
                            resource_type=res.resource_type, resource_name=res.resource_name))
    return make(ctx.response_type, responses=tuple(results))


APIS = [
    Api(32, 1, 4, handle_describe_configs, name="DescribeConfigs"),
    Api(44, 0, 1, handle_incremental_alter_configs, name="IncrementalAlterConfigs"),
]
