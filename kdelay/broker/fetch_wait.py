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
from collections.abc import Callable

from ..fetch.long_poll import due_in_ms
from ..records import AppendResult

MIN_WAIT_S = 0.001  # a wake-up time already reached must not spin the loop


class Wakeups:
    """The fetches waiting on one partition."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._waiters: set[asyncio.Future] = set()
        self.earliest_wake = math.inf  # time.monotonic() of the first waiter's own wake-up
        self.settling = 0  # waiters still working out their wake-up: every append wakes them

    def appended(self, result: AppendResult) -> None:
        """The log's append listener (any thread; called once the append is in the log):
        wake the waiters if the batch is due before the first of them would wake anyway,
        or while one is still working out when to wake."""
        if not self._waiters:
            return
        due_at = time.monotonic() + max(0, due_in_ms(result)) / 1000
        if self.settling or due_at < self.earliest_wake:
            self._loop.call_soon_threadsafe(self.wake)

    def wake(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def remove(self, fut: asyncio.Future) -> None:
        self._waiters.discard(fut)
        if not self._waiters:
            self.earliest_wake = math.inf


async def wait_any(wakeups: list[Wakeups], next_due_ms: Callable[[], int | None],
                   remaining_s: float) -> None:
    """Sleep until one of `wakeups` is woken, the next record comes due (`next_due_ms()`:
    ms from now, None: nothing pending) or `remaining_s` passes; at least MIN_WAIT_S.

    The waiter registers before it asks when the next record comes due: an append made
    before that question is seen by it, one made after wakes the waiter (while it is
    `settling`, any append does), so none is missed between a fetch's look and its sleep."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    for w in wakeups:
        w._waiters.add(fut)
        w.settling += 1
    try:
        try:
            due = next_due_ms()
            timeout_s = remaining_s if due is None else min(remaining_s, due / 1000)
            timeout_s = max(MIN_WAIT_S, timeout_s)
            wake_at = time.monotonic() + timeout_s
            for w in wakeups:  # before settling ends: no moment without a wake-up rule
                w.earliest_wake = min(w.earliest_wake, wake_at)
        finally:
            for w in wakeups:
                w.settling -= 1
        handle = loop.call_later(timeout_s, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
    finally:
        for w in wakeups:
            w.remove(fut)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
