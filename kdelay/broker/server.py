"""The listener: accepts connections on the broker's event loop and runs each one's loop.

Start: open every topic, bind, serve. Stop: stop accepting, let each connection finish the
request it is answering, close the connections, close every topic (each flushes).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from ..errors import InvalidConfigError
from .apis import all_apis
from .connection import Connection
from .dispatcher import Dispatcher
from .errors import BrokerConfigError
from .frame_stream import FrameStream
from .groups.share_configs import SPECS as GROUP_SPECS
from .maintenance import maintain
from .security import credentials, tls
from .settings import BROKER_CONFIGS, BrokerSettings, parse_host_port
from .state import BrokerState
from .topic_configs import REMOTE_OPTION_PREFIX, REMOTE_STORAGE, TopicConfigs
from .topic_configs import SPECS as TOPIC_SPECS

if TYPE_CHECKING:
    from .ops.http import OperationsEndpoint

log = logging.getLogger("kdelay.broker")


def check_defaults(settings: BrokerSettings) -> None:
    """Refuse bad broker-wide defaults at start (BrokerConfigError), not at the first
    topic they would make; warn of names nothing reads (a typo would otherwise leave its
    default in force unnoticed)."""
    try:
        TopicConfigs({}, settings.configs)
    except InvalidConfigError as e:
        raise BrokerConfigError(str(e)) from None
    for name in BROKER_CONFIGS:
        settings.config(name)
    unknown = sorted(n for n in settings.configs if not known_config(n))
    if unknown:
        log.warning("ignoring --config names the broker does not know: %s",
                    ", ".join(unknown))


def known_config(name: str) -> bool:
    """Whether a --config name is read: the broker's own, a topic config's default, a
    share group config's default, or the tiered store's URL and options."""
    return name in BROKER_CONFIGS or name in TOPIC_SPECS or name in GROUP_SPECS or \
        name == REMOTE_STORAGE or name.startswith(REMOTE_OPTION_PREFIX)


class Server:
    def __init__(self, root: str, settings: BrokerSettings, *, sasl_users: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 http: str | None = None):
        self.state = BrokerState(root, settings, Dispatcher(all_apis()))
        if sasl_users is not None:
            self.state.sasl_users = credentials.load(os.fspath(sasl_users))
            settings.sasl_required = True
        if (tls_cert is None) != (tls_key is None):
            raise BrokerConfigError("TLS needs both a certificate and a key")
        self.tls = tls.server_context(os.fspath(tls_cert), os.fspath(tls_key)) \
            if tls_cert is not None and tls_key is not None else None
        self.http = parse_host_port(http, "http") if http else None
        self.endpoint: OperationsEndpoint | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._connections: dict[Connection, asyncio.Task] = {}
        self._maintenance: asyncio.Task | None = None

    async def start(self) -> None:
        """Open the topics and bind the listener (its port is then in state.port)."""
        check_defaults(self.state.settings)
        self.state.topics.open_existing()
        host, port = self.state.settings.listen
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: FrameStream(self._connected), host,
                                                port, reuse_address=True, ssl=self.tls)
        self.state.host, self.state.port = self._server.sockets[0].getsockname()[:2]
        if host not in ("127.0.0.1", "::1", "localhost") and not self.state.settings.sasl_required:
            log.warning("listening on %s:%d without SASL: anyone who reaches it can read and "
                        "write every topic", host, self.state.port)
        self._maintenance = asyncio.get_running_loop().create_task(maintain(self.state))
        log.info("kdelay broker serving %s on %s:%d", self.state.root, self.state.host,
                 self.state.port)
        if self.http is not None:
            from .ops.http import OperationsEndpoint  # aiohttp loads only when asked for
            from .ops.metrics import BrokerMetrics
            metrics = BrokerMetrics(self.state)
            self.state.dispatcher.observe = metrics.observe
            self.endpoint = OperationsEndpoint(self.state, metrics)
            await self.endpoint.start(*self.http, self.tls)

    def _connected(self, stream: FrameStream) -> None:
        """A new connection: its loop runs in a task of its own."""
        asyncio.get_running_loop().create_task(self._accept(stream, stream))

    async def _accept(self, reader: FrameStream, writer: FrameStream) -> None:
        if len(self.state.connections) >= self.state.settings.max_connections:
            log.warning("refusing a connection: max.connections (%d) are open",
                        self.state.settings.max_connections)
            writer.close()
            return
        conn = Connection(reader, writer, self.state)
        self.state.connections.add(conn)
        task = asyncio.current_task()
        assert task is not None  # each connection's loop is a task of its own (_connected)
        self._tasks.add(task)
        self._connections[conn] = task
        try:
            await conn.serve()
        except asyncio.CancelledError:
            pass  # a stopping broker ended it between requests: a normal end
        finally:
            self.state.connections.discard(conn)
            self._tasks.discard(task)
            self._connections.pop(conn, None)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, answer what is in flight (up to grace_s), close every topic."""
        if self._server is not None:
            self._server.close()
        if self.endpoint is not None:
            await self.endpoint.stop()
        if self._maintenance is not None:
            self._maintenance.cancel()
        for conn, task in list(self._connections.items()):
            conn.closing = True  # finish the request being answered, then stop
            if not conn.busy:
                task.cancel()  # idle between requests: ends now
        self.state.groups.close()  # members waiting in a join or sync are answered
        self.state.consumer_groups.close()
        self.state.share_groups.close()  # share members release what they hold
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        try:
            if self.state.producer_states is not None:
                self.state.producer_states.close()  # snapshots at the log ends
            self.state.served.close()  # the views number what is due and fsync
        finally:
            self.state.topics.close()
