"""A client connection's bytes, read as Kafka frames into the buffer each frame needs: the
connection's reader (`read_frame`) and writer (the few methods of asyncio's StreamWriter
that connection.py uses), built on asyncio's BufferedProtocol.

asyncio's streams copy a request three times before anyone reads it: the socket's bytes
into a new bytes object per read, that into the stream's buffer, and the frame out of it.
Here size prefixes and small frames come out of a small staging buffer, and a frame larger
than it gets a buffer of its own, into which the socket reads directly: a Produce request
of a few hundred KB is copied once, by the kernel, into the buffer the handlers read (a
read-only memoryview; kio and the record pass read it in place). That buffer is made as
soon as the size prefix is in, while a reader waits for the frame (read ahead, in
buffer_updated): the connection's coroutine wakes once, when the frame is whole.

A stalled frame is the connection's watchdog's to notice (connection.py, told of each
frame's first byte by `frame_started`). Per ~450 KB Produce request from librdkafka: one
wake-up of the loop, three reads (the staging buffer's, the body's, the empty one that
ends the loop's turn). (Setting SO_RCVLOWAT to the rest of a large frame, so that the
kernel reports it readable only when whole, was measured and dropped: librdkafka's
request arrives in one go over loopback, so the wake-ups and reads were the same, and
the broker's CPU per record too, 10 paired rounds.)

Memory: a STAGE-byte staging buffer per connection (allocated on its first bytes) and,
while a large frame is read, that frame. Reading pauses while the staging buffer is full
and nobody reads it (a client pipelining faster than it is answered waits in the kernel's
socket buffer, as with the streams' limit).
"""

from __future__ import annotations

import asyncio
import struct
import sys
from typing import Any

import numpy as np

from .errors import FrameError

STAGE = 8192  # the staging buffer: prefixes and small requests
_SIZE = struct.Struct(">i")


class FrameStream(asyncio.BufferedProtocol):
    """One connection's protocol and its reader/writer (see the module)."""

    def __init__(self, on_connected: Any):
        self._on_connected = on_connected  # called with this stream once connected
        self.transport: asyncio.Transport | None = None
        self._loop: Any = None  # the running loop, once connected
        self._stage: bytearray | None = None
        self._s0 = self._s1 = 0          # unread staged bytes: [_s0, _s1)
        self._target: np.ndarray | None = None  # a large read's own buffer, and how full
        self._got = 0
        self._want = 0                   # bytes the waiting reader needs staged
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._paused = False             # reading paused (staging buffer full)
        self._write_paused = False
        self._drained: asyncio.Future | None = None
        self._lost: BaseException | None = None
        self._interrupted: BaseException | None = None  # raised by every read from now on
        self._gathers = False            # the transport's writelines is a gather write
        self._limit = -1                 # the frame size limit while a frame is read
        self._boundary = False           # a reader waits for a frame not yet begun
        self._body: np.ndarray | None = None  # a large frame's buffer, while it is read
        # called at a frame's first byte (the connection's stall watchdog)
        self.frame_started: Any = lambda: None

    # ------------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        self._gathers = sys.version_info >= (3, 12) or \
            type(transport).__module__.startswith("uvloop")
        self._on_connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._target is not None:
            return self._target.data[self._got:]
        if self._stage is None:
            self._stage = bytearray(STAGE)
        if self._s0 == self._s1:
            self._s0 = self._s1 = 0
        elif self._s1 == len(self._stage) and self._s0:  # room at the end: move to the front
            n = self._s1 - self._s0
            self._stage[:n] = self._stage[self._s0:self._s1]
            self._s0, self._s1 = 0, n
        return memoryview(self._stage)[self._s1:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._target is not None:
            self._got += nbytes
            if self._got == len(self._target):
                self._target = None  # full: the socket's next bytes go to the stage
                self._wake()
            return
        self._s1 += nbytes
        if self._boundary:  # the first byte of the frame a reader waits for
            self._boundary = False
            self.frame_started()
        if self._limit >= 0 and self._body is None and self._s1 - self._s0 >= 4:
            size = _SIZE.unpack_from(self._stage, self._s0)[0]  # type: ignore[arg-type]
            if STAGE < 4 + size <= 4 + self._limit:  # (a bad size is the reader's to refuse)
                self._start_body(size)  # read ahead: the reader wakes once, when it is in
                if self._target is not None:
                    return
        if self._s1 - self._s0 >= self._want:
            self._wake()
        if self._s1 == len(self._stage) and self._s0 == 0 and not self._paused:  # type: ignore[arg-type]
            self._paused = True  # full, unread: wait for the reader
            self.transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # keep the transport open, half-closed, so that requests read before the end are
        # still answered (as asyncio's streams do); TLS cannot half-close
        return self.transport.get_extra_info("sslcontext") is None  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._lost = exc or ConnectionResetError("connection lost")
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(self._lost)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def interrupt(self, error: BaseException) -> None:
        """Make the read under way (and every later one) raise `error` (the connection's
        stall watchdog)."""
        self._interrupted = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    async def _wait(self) -> None:
        if self._interrupted is not None:
            raise self._interrupted
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _consumed(self, n: int) -> None:
        self._s0 += n
        if self._paused:
            self._paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    # ------------------------------------------------------------------ reader

    async def read_frame(self, limit: int) -> Any:
        """The next frame's body, its size prefix read and checked (FrameError for a size
        below 0 or over `limit`): bytes when the frame fits the staging buffer, else a
        read-only memoryview of a buffer of its own; None when the stream ends between
        frames, IncompleteReadError when it ends inside one. `frame_started` is called
        when the frame's first byte is in."""
        self._limit = limit
        if self._s1 > self._s0:
            self.frame_started()  # (pipelined: already here)
        else:
            self._boundary = True  # buffer_updated calls it at the first byte
        try:
            while self._body is None:
                staged = self._s1 - self._s0
                if staged >= 4:
                    size = _SIZE.unpack_from(self._stage, self._s0)[0]  # type: ignore[arg-type]
                    if size < 0 or size > limit:
                        raise FrameError(f"a request of {size} bytes "
                                         f"(socket.request.max.bytes is {limit})")
                    if 4 + size > STAGE:
                        self._start_body(size)
                        break
                    if staged >= 4 + size:
                        out = bytes(self._stage[self._s0 + 4:self._s0 + 4 + size])  # type: ignore[index]
                        self._consumed(4 + size)
                        return out
                    if self._s0 + 4 + size > len(self._stage):  # type: ignore[arg-type]
                        self._compact()
                    self._want = 4 + size
                else:
                    self._want = 4
                if self._eof:  # (and the frame is not all here)
                    if not staged:
                        return None
                    raise asyncio.IncompleteReadError(self._take_staged(), self._want)
                await self._wait()
            body = self._body
            assert body is not None  # (the loop above ends with one)
            while self._got < len(body):
                if self._eof:
                    raise asyncio.IncompleteReadError(body[:self._got].tobytes(), len(body))
                await self._wait()
            return body.data.toreadonly()
        finally:
            self._limit = -1
            self._boundary = False
            self._body = self._target = None

    def _start_body(self, size: int) -> None:
        """Read the frame whose `size` prefix is staged (all that is staged is of it) into
        a buffer of its own from here on: the staged rest copied in, the socket's next
        bytes read straight into it."""
        body = self._body = np.empty(size, np.uint8)  # (not zeroed: the socket fills it)
        take = self._s1 - self._s0 - 4
        if take:
            body[:take] = np.frombuffer(self._stage, np.uint8,  # type: ignore[arg-type]
                                        take, self._s0 + 4)
        self._consumed(take + 4)
        self._got = take
        if take < size:
            self._target = body

    def _take_staged(self) -> bytes:
        out = bytes(self._stage[self._s0:self._s1]) if self._stage is not None else b""
        self._consumed(self._s1 - self._s0)
        return out

    def _compact(self) -> None:
        n = self._s1 - self._s0
        self._stage[:n] = self._stage[self._s0:self._s1]  # type: ignore[index]
        self._s0, self._s1 = 0, n

    # ------------------------------------------------------------------ writer

    def write(self, data: Any) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def writelines(self, parts: list) -> None:
        """Write `parts` in order, as one gather write where the loop has one (uvloop's
        writelines: one system call for them all, each buffer sent where it lies, not
        copied), else one write each (asyncio's writelines before Python 3.12 joins them
        into a copy)."""
        if self._gathers:
            self.transport.writelines(parts)  # type: ignore[union-attr]
        else:
            for part in parts:
                self.transport.write(part)  # type: ignore[union-attr]

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self._lost is not None:
            raise ConnectionResetError("connection lost") from self._lost
        if self._write_paused:
            self._drained = self._loop.create_future()
            try:
                await self._drained
            finally:
                self._drained = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)  # type: ignore[union-attr]
