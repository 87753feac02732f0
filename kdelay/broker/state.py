"""What the whole broker shares: its settings, its address, the dispatcher, the topics,
and the open connections. Handlers reach it as `ctx.broker`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .security.credentials import User
from .served import ServedPartitions
from .settings import BrokerSettings
from .topic_ids import TopicIds
from .topics import TopicRegistry

if TYPE_CHECKING:
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
        self.topic_ids = TopicIds(self.topics)  # Metadata hands them out; Fetch v13+ uses them
        self.served = ServedPartitions(self.topics)  # what consumers read of each partition
        self.connections: set[Connection] = set()
        # made by the produce family on first use (apis/produce.py)
        self.producer_states: ProducerStates | None = None
        self.producer_ids: ProducerIds | None = None
        self.sasl_users: dict[str, User] | None = None  # None: no SASL on the listener
        self.host, self.port = settings.listen  # the bound address, once bound

    @property
    def advertised(self) -> tuple[str, int]:
        """The host and port Metadata and FindCoordinator name."""
        return self.settings.advertised or (self.host, self.port)
