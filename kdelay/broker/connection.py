"""One client connection: frames read, answered in order, written back.

Kafka answers a connection's requests one at a time, in order (a client pipelines them and
matches answers by correlation id and order), so a connection is one loop: read a frame,
answer it, write the answer. A frame over `socket.request.max.bytes`, one that stalls
mid-way (from its first byte, the size prefix included) longer than
`kdelay.frame.timeout.ms`, or one that does not parse closes this connection only; a
connection idle between frames is kept.

The stall limit is one watchdog timer per connection, armed when a frame starts and only
then: when it fires it closes the connection if the frame under way began at least the
limit ago, else it re-arms at that frame's deadline (frames finish long before it fires,
so a busy connection's timer fires about once per limit, not once per frame, and an idle
one's fires once more and is not re-armed). asyncio.timeout per frame made and cancelled a
timer and looked up the running loop and task every time (a getpid system call each, on
Python 3.11).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .errors import FrameError

if TYPE_CHECKING:
    from .frame_stream import FrameStream
    from .security.sasl import Exchange
    from .state import BrokerState

log = logging.getLogger("kdelay.broker")


class Connection:
    """A client's connection and what the broker knows of it (its peer address; whether it
    has authenticated, and as whom: without SASL every connection is authenticated)."""

    def __init__(self, reader: FrameStream, writer: FrameStream, broker: BrokerState):
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
        self._loop = asyncio.get_running_loop()
        self._frame_since: float | None = None  # loop time the frame being read began
        self._watchdog: asyncio.TimerHandle | None = None
        reader.frame_started = self._frame_started

    def _frame_started(self) -> None:
        """A frame's first bytes are in: its stall deadline counts from now."""
        now = self._frame_since = self._loop.time()
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(now + self.broker.settings.frame_timeout_s,
                                                self._check_stall)

    def _check_stall(self) -> None:
        """The watchdog: the frame under way (if any) stalled, or its deadline later."""
        self._watchdog = None
        since = self._frame_since
        if since is None:
            return  # between frames: armed again when the next one starts
        limit = self.broker.settings.frame_timeout_s
        if self._loop.time() >= since + limit:
            self.reader.interrupt(FrameError(f"a request stalled mid-frame for {limit} s"))
        else:
            self._watchdog = self._loop.call_at(since + limit, self._check_stall)

    async def serve(self) -> None:
        """Answer frames until the client goes, a frame is refused, or the broker stops."""
        try:
            while not self.closing:
                # no deadline before a frame starts: clients keep idle connections (Kafka
                # closes them after connections.max.idle.ms, a separate limit this broker
                # does not set), but a started frame must finish in time (the watchdog)
                try:
                    frame = await self.reader.read_frame(
                        self.broker.settings.socket_request_max_bytes)
                except (asyncio.IncompleteReadError, ConnectionError):
                    raise FrameError("the connection closed mid-frame") from None
                if frame is None:
                    return  # the client went away between requests
                self._frame_since = None
                self.busy = True
                try:
                    answer = await self.broker.dispatcher.answer(frame, self.broker, self)
                finally:
                    self.busy = False
                if answer is not None:
                    self.writer.writelines(answer)  # (a Fetch's batches: never joined)
                    await self.writer.drain()
        except FrameError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
        except ConnectionError as e:
            log.info("connection from %s lost: %s", self.peer, e)
        except Exception:
            log.exception("closing connection from %s after an internal error", self.peer)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            self.writer.close()
