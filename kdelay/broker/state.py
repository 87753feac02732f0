"""What the whole broker shares: its settings, its address, the dispatcher, the topics,
and the open connections. Handlers reach it as `ctx.broker`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .security.credentials import User
from .settings import BrokerSettings
from .topics import TopicRegistry

if TYPE_CHECKING:
    from .connection import Connection
    from .dispatcher import Dispatcher

NODE_ID = 0  # the broker is node 0 of a one-node cluster, leader of every partition


class BrokerState:
    def __init__(self, root: str, settings: BrokerSettings, dispatcher: Dispatcher):
        self.root = root
        self.settings = settings
        self.dispatcher = dispatcher
        self.topics = TopicRegistry(root)
        self.connections: set[Connection] = set()
        self.sasl_users: dict[str, User] | None = None  # None: no SASL on the listener
        self.host, self.port = settings.listen  # the bound address, once bound

    @property
    def advertised(self) -> tuple[str, int]:
        """The host and port Metadata and FindCoordinator name."""
        return self.settings.advertised or (self.host, self.port)
