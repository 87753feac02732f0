"""When to fsync the active segment: after `flush_messages` records, or once the oldest
unflushed append is `flush_ms` old (Kafka's log.flush.interval.messages / .ms). Both None
leaves flushing to rolls, clean close and explicit `Log.flush` calls."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ...config import LogConfig

_log = logging.getLogger("kdelay")


class FlushPolicy:
    def __init__(self, config: LogConfig):
        self._messages = config.flush_messages
        self._ms = config.flush_ms
        self.flushes = self._messages is not None or self._ms is not None  # else only on
        # roll, close and Log.flush: no decision per append
        self._unflushed = 0
        self._oldest: float | None = None  # time.monotonic() of the oldest unflushed append

    def due_after(self, n: int) -> bool:
        """True if appending `n` more records makes a flush due (changes nothing): the
        append then fsyncs its batch before acknowledging it."""
        return self._due(self._unflushed + n)

    def appended(self, n: int) -> bool:
        """Note an append of `n` records; True if the segment should be flushed now."""
        self._unflushed += n
        if self._oldest is None:
            self._oldest = time.monotonic()
        return self._due(self._unflushed)

    def _due(self, unflushed: int) -> bool:
        """The flush rule: `unflushed` records reach flush_messages, or the oldest unflushed
        append is flush_ms old."""
        return self._messages is not None and unflushed >= self._messages or self.overdue()

    def overdue(self) -> bool:
        """True if the oldest unflushed append is at least `flush_ms` old."""
        return (self._ms is not None and self._oldest is not None
                and (time.monotonic() - self._oldest) * 1000 >= self._ms)

    def flushed(self) -> None:
        self._unflushed = 0
        self._oldest = None


def start_flusher(owner: object, tick: Callable[[Any], bool], period_s: float, name: str
                  ) -> threading.Thread:
    """The flush_ms thread: every period_s/2 call `tick(owner)` (which fsyncs if the policy
    is overdue) until it returns False (closed) or the owner is garbage-collected. It holds
    only a weak reference, so it does not keep the owner alive."""
    ref = weakref.ref(owner)

    def loop() -> None:
        while True:
            time.sleep(period_s / 2)
            live = ref()
            if live is None:
                return
            try:
                if not tick(live):
                    return
            except Exception as e:  # noqa: BLE001 - a refused fsync (disk full, I/O error)
                # must not end the thread: flush_ms would stop holding, silently; the next
                # tick tries again (and an append that finds the flush overdue does too)
                _log.warning("kdelay: %s: the flush_ms flush failed, retrying: %s", name, e)
            del live

    thread = threading.Thread(target=loop, daemon=True, name=name)
    thread.start()
    return thread
