"""`Broker`: the Kafka-protocol broker on a background thread (`kdelay serve` runs the same
server in the foreground).

    with Broker(root, listen="127.0.0.1:0", config={"num.partitions": "3"}) as broker:
        broker.bootstrap_servers        # "127.0.0.1:PORT": the address it bound
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from .settings import DEFAULT_LISTEN, settings_from


class Broker:
    """Serves ROOT on a background thread from construction until `close()`.

    Construction opens every topic (taking their locks) and binds the listener before it
    returns; errors (a locked partition, a port in use, a bad config) raise from it."""

    def __init__(self, root: str | os.PathLike, *, listen: str = DEFAULT_LISTEN,
                 advertised_listener: str | None = None,
                 config: dict[str, Any] | None = None, **security: Any):
        from .server import Server  # the protocol library loads only when a broker starts
        settings = settings_from(listen, advertised_listener, config)
        self._server = Server(os.fspath(root), settings, **security)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kdelay-broker", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._server.start())
        except BaseException as e:
            self._error = e
            self._started.set()
            self._loop.close()
            return
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    @property
    def http_address(self) -> str | None:
        """'HOST:PORT' of the operations endpoint (None without one)."""
        endpoint, http = self._server.endpoint, self._server.http
        return None if endpoint is None or http is None else f"{http[0]}:{endpoint.port}"

    @property
    def bootstrap_servers(self) -> str:
        """'HOST:PORT' of the listener, as a client's bootstrap.servers wants it."""
        host, port = self._server.state.advertised
        return f"{host}:{port}"

    def close(self) -> None:
        """Stop accepting, answer the requests in flight, flush and close every log. A second
        close does nothing."""
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop)
        try:
            future.result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def serve_forever(root: str, settings_kwargs: dict[str, Any],
                        security: dict[str, Any] | None = None) -> None:
    """`kdelay serve`: serve in the foreground until SIGTERM or SIGINT, then stop cleanly."""
    import signal

    from .allocator import settle_collector, tune_for_requests
    from .server import Server
    tune_for_requests()  # this process is the broker's own (allocator.py)
    server = Server(root, settings_from(**settings_kwargs), **(security or {}))
    await server.start()
    settle_collector()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    http = f" (http on {server.http[0]}:{server.endpoint.port})" \
        if server.endpoint and server.http else ""
    print(f"kdelay broker serving {root} on {server.state.host}:{server.state.port}{http}",
          flush=True)
    await stop.wait()
    await server.stop()
