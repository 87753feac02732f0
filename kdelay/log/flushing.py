"""When to fsync the active segment: after `flush_messages` records, or once the oldest
unflushed append is `flush_ms` old (Kafka's log.flush.interval.messages / .ms). Both None
leaves flushing to rolls, clean close and explicit `Log.flush` calls."""

from __future__ import annotations

import time

from ..config import LogConfig


class FlushPolicy:
    def __init__(self, config: LogConfig):
        self._messages = config.flush_messages
        self._ms = config.flush_ms
        self._unflushed = 0
        self._oldest: float | None = None  # time.monotonic() of the oldest unflushed append

    def due_after(self, n: int) -> bool:
        """True if appending `n` more records makes a flush due (changes nothing): the
        append then fsyncs its batch before acknowledging it."""
        return (self._messages is not None and self._unflushed + n >= self._messages
                or self.overdue())

    def appended(self, n: int) -> bool:
        """Note an append of `n` records; True if the segment should be flushed now."""
        self._unflushed += n
        if self._oldest is None:
            self._oldest = time.monotonic()
        return (self._messages is not None and self._unflushed >= self._messages
                or self._ms is not None and self.overdue())

    def overdue(self) -> bool:
        """True if the oldest unflushed append is at least `flush_ms` old."""
        return (self._ms is not None and self._oldest is not None
                and (time.monotonic() - self._oldest) * 1000 >= self._ms)

    def flushed(self) -> None:
        self._unflushed = 0
        self._oldest = None
