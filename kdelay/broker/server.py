"""The listener: accepts connections on the broker's event loop and runs each one's loop.

Start: open every topic, bind, serve. Stop: stop accepting, let each connection finish the
request it is answering, close the connections, close every topic (each flushes).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from .apis import all_apis
from .connection import Connection
from .dispatcher import Dispatcher
from .errors import BrokerConfigError
from .security import credentials, tls
from .settings import BrokerSettings, parse_host_port
from .state import BrokerState

if TYPE_CHECKING:
    from .ops.http import OperationsEndpoint

log = logging.getLogger("kdelay.broker")


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

    async def start(self) -> None:
        """Open the topics and bind the listener (its port is then in state.port)."""
        self.state.topics.open_existing()
        host, port = self.state.settings.listen
        self._server = await asyncio.start_server(self._accept, host, port,
                                                  limit=1 << 16, reuse_address=True,
                                                  ssl=self.tls)
        self.state.host, self.state.port = self._server.sockets[0].getsockname()[:2]
        if host not in ("127.0.0.1", "::1", "localhost") and not self.state.settings.sasl_required:
            log.warning("listening on %s:%d without SASL: anyone who reaches it can read and "
                        "write every topic", host, self.state.port)
        log.info("kdelay broker serving %s on %s:%d", self.state.root, self.state.host,
                 self.state.port)
        if self.http is not None:
            from .ops.http import OperationsEndpoint  # aiohttp loads only when asked for
            from .ops.metrics import BrokerMetrics
            metrics = BrokerMetrics(self.state)
            self.state.dispatcher.observe = metrics.observe
            self.endpoint = OperationsEndpoint(self.state, metrics)
            await self.endpoint.start(*self.http, self.tls)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self.state)
        self.state.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.serve()
        finally:
            self.state.connections.discard(conn)
            if task is not None:
                self._tasks.discard(task)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, answer what is in flight (up to grace_s), close every topic."""
        if self._server is not None:
            self._server.close()
        if self.endpoint is not None:
            await self.endpoint.stop()
        for conn in list(self.state.connections):
            conn.closing = True  # finish the request being answered, then stop
            conn.reader.feed_eof()  # a connection idle between requests ends now
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        self.state.topics.close()
