"""Long-polling fetches on the event loop: a Fetch that finds less than min_bytes waits,
without blocking the loop, until a partition it reads may have more (a record comes due by
the clock, or an append due at once), or its max_wait passes.

Each served partition has a `Wakeups`: the futures of the fetches waiting on it and the
earliest time one of them wakes by itself. The log's append listener (called on whatever
thread appended) hands an append to the loop only when it is due before that time, so a
stream of appends due later costs the waiting fetches nothing. A fetch works out its own
wake-up from the earliest pending deliverAfter of its partitions.
"""

from __future__ import annotations

import asyncio
import math
import time

from ..fetch.long_poll import due_in_ms
from ..records import AppendResult

MIN_WAIT_S = 0.001  # a wake-up time already reached must not spin the loop


class Wakeups:
    """The fetches waiting on one partition."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._waiters: set[asyncio.Future] = set()
        self.earliest_wake = math.inf  # time.monotonic() of the first waiter's own wake-up

    def appended(self, result: AppendResult) -> None:
        """The log's append listener (any thread): wake the waiters if the batch is due
        before the first of them would wake anyway."""
        if not self._waiters:
            return
        due_at = time.monotonic() + max(0, due_in_ms(result)) / 1000
        if due_at < self.earliest_wake:
            self._loop.call_soon_threadsafe(self.wake)

    def wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def add(self, fut: asyncio.Future, wake_at: float) -> None:
        self._waiters.add(fut)
        self.earliest_wake = min(self.earliest_wake, wake_at)

    def remove(self, fut: asyncio.Future) -> None:
        self._waiters.discard(fut)
        if not self._waiters:
            self.earliest_wake = math.inf


async def wait_any(wakeups: list[Wakeups], timeout_s: float) -> None:
    """Sleep until one of `wakeups` is woken or `timeout_s` (at least MIN_WAIT_S) passes."""
    loop = asyncio.get_running_loop()
    timeout_s = max(MIN_WAIT_S, timeout_s)
    fut = loop.create_future()
    wake_at = time.monotonic() + timeout_s
    for w in wakeups:
        w.add(fut, wake_at)
    handle = loop.call_later(timeout_s, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        handle.cancel()
        for w in wakeups:
            w.remove(fut)
