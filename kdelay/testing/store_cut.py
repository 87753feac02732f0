"""A store whose connection is cut in the middle of a request: a TCP proxy on loopback in
front of a real S3 endpoint (moto's server) that forwards bytes both ways and, once
`cut_after` bytes of requests have gone through, closes every connection and refuses new
ones until `restore()`. So an upload can be interrupted at a chosen byte (a multipart
upload after some of its parts), deterministically, without timing."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

__all__ = ["CuttingProxy"]


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to `target` ("http://host:port"). Use as a context
    manager; `endpoint` is the URL to give the store instead of the target's."""

    def __init__(self, target: str, cut_after: int | None = None):
        parts = urlsplit(target)
        self._target = (parts.hostname, parts.port)
        self.cut_after = cut_after
        self.sent = 0  # request bytes forwarded
        self._lock = threading.Lock()
        self._down = False
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._listener.close()
        self._cut()

    def restore(self, cut_after: int | None = None) -> None:
        """Take connections again (cut again after `cut_after` more request bytes)."""
        with self._lock:
            self._down = False
            self.sent = 0
            self.cut_after = cut_after

    @property
    def down(self) -> bool:
        return self._down

    def _cut(self) -> None:
        with self._lock:
            self._down = True
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._down:
                    client.close()
                    continue
                server = socket.create_connection(self._target)
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, request: bool) -> None:
        try:
            while data := src.recv(65536):
                if request:
                    with self._lock:
                        limit = self.cut_after  # (read once: another thread may change it)
                        room = None if limit is None else limit - self.sent
                        if room is not None and room <= 0:
                            data = b""
                        elif room is not None:
                            data = data[:room]
                        self.sent += len(data)
                    if data:
                        dst.sendall(data)
                    if limit is not None and self.sent >= limit:
                        self._cut()
                        return
                else:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
