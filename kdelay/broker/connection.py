"""One client connection: frames read, answered in order, written back.

Kafka answers a connection's requests one at a time, in order (a client pipelines them and
matches answers by correlation id and order), so a connection is one loop: read a frame,
answer it, write the answer. A frame over `socket.request.max.bytes`, one that stalls
mid-way past the idle timeout, or one that does not parse closes this connection only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from . import protocol
from .errors import FrameError

if TYPE_CHECKING:
    from .security.sasl import Exchange
    from .state import BrokerState

log = logging.getLogger("kdelay.broker")


class Connection:
    """A client's connection and what the broker knows of it (its peer address; whether it
    has authenticated, and as whom: without SASL every connection is authenticated)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 broker: BrokerState):
        self.reader = reader
        self.writer = writer
        self.broker = broker
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.authenticated = not broker.settings.sasl_required
        self.principal: str | None = None
        self.sasl: Exchange | None = None  # the SASL exchange under way
        self.closing = False
        self.busy = False  # answering a request (a stopping broker lets it finish)

    async def serve(self) -> None:
        """Answer frames until the client goes, a frame is refused, or the broker stops."""
        settings = self.broker.settings
        try:
            while not self.closing:
                try:
                    prefix = await self.reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client went away between requests
                size = protocol.read_size(prefix)
                if size < 0 or size > settings.socket_request_max_bytes:
                    raise FrameError(f"a request of {size} bytes (socket.request.max.bytes "
                                     f"is {settings.socket_request_max_bytes})")
                try:
                    frame = await asyncio.wait_for(self.reader.readexactly(size),
                                                   settings.frame_timeout_s)
                except TimeoutError:
                    raise FrameError(f"a request stalled mid-frame for "
                                     f"{settings.frame_timeout_s} s") from None
                except (asyncio.IncompleteReadError, ConnectionError):
                    raise FrameError("the connection closed mid-frame") from None
                self.busy = True
                try:
                    answer = await self.broker.dispatcher.answer(frame, self.broker, self)
                finally:
                    self.busy = False
                if answer is not None:
                    self.writer.write(answer)
                    await self.writer.drain()
        except FrameError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
        except ConnectionError as e:
            log.info("connection from %s lost: %s", self.peer, e)
        except Exception:
            log.exception("closing connection from %s after an internal error", self.peer)
        finally:
            self.writer.close()
