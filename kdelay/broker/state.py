"""What the whole broker shares: its settings, its address, the dispatcher, the topics,
and the open connections. Handlers reach it as `ctx.broker`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .groups.consumer_protocol import ConsumerGroups
from .groups.coordinator import GroupCoordinator
from .groups.offsets import OffsetStore
from .groups.share import ShareGroups
from .groups.share_configs import GroupConfigStore
from .security.credentials import User
from .served import ServedPartitions
from .settings import BrokerSettings
from .topics import TopicRegistry

if TYPE_CHECKING:
    from .answer_template import AnswerTemplate
    from .apis.produce import ProducerIds
    from .connection import Connection
    from .dispatcher import Dispatcher
    from .producer_state import ProducerStates

NODE_ID = 0  # the broker is node 0 of a one-node cluster, leader of every partition


class BrokerState:
    def __init__(self, root: str, settings: BrokerSettings, dispatcher: Dispatcher):
        self.root = root
        self.settings = settings
        self.dispatcher = dispatcher
        self.topics = TopicRegistry(root, settings.configs)
        self.served = ServedPartitions(self.topics)  # what consumers read of each partition
        # a topic reopened (new configs, more partitions) or deleted: its views go
        self.topics.add_listener(lambda name, event: self.served.forget(name))
        self.groups = GroupCoordinator(int(settings.config(
            "group.initial.rebalance.delay.ms")))  # classic consumer groups
        self.consumer_groups = ConsumerGroups(  # KIP-848's: the broker assigns
            self._partition_count,
            int(settings.config("group.consumer.session.timeout.ms")),
            int(settings.config("group.consumer.heartbeat.interval.ms")))
        self.offsets = OffsetStore(self.served)  # committed offsets of both kinds
        self.share_groups = ShareGroups(  # share groups: kdelay's queue groups
            self.topics, GroupConfigStore(root, settings.configs),
            int(settings.config("group.share.session.timeout.ms")),
            int(settings.config("group.share.heartbeat.interval.ms")))
        self.topics.add_listener(self.share_groups.forget_topic)
        self.connections: set[Connection] = set()
        self.sasl_users: dict[str, User] | None = None  # None: no SASL on the listener
        # made by the produce family on first use (apis/produce.py)
        self.producer_states: ProducerStates | None = None
        self.producer_ids: ProducerIds | None = None
        # one-partition Produce answers by (version, topic, partition): None where kio's
        # encoding cannot be a template (apis/produce.py, answer_template.py)
        self.produce_answers: dict[tuple[int, str, int], AnswerTemplate | None] = {}
        # the ApiVersions answer of each version, encoded once (apis/api_versions.py)
        self.api_versions_answers: dict[int, AnswerTemplate | None] = {}
        self.host, self.port = settings.listen  # the bound address, once bound

    def _partition_count(self, name: str) -> int:
        topic = self.topics.get(name)
        return topic.partitions if topic is not None else 0

    @property
    def advertised(self) -> tuple[str, int]:
        """The host and port Metadata and FindCoordinator name."""
        return self.settings.advertised or (self.host, self.port)
