"""Deadlines for the group coordinators: member sessions and rebalances, on an injectable
clock, in one heap.

Each timer has a key (("session", group, member), ("join", group), ...) and at most one
deadline. Moving a deadline later, which is what every heartbeat does, only records the new
deadline: the heap keeps the earlier entry, and when that entry comes up it is pushed again
at the recorded deadline. So a heartbeat costs O(1), an earlier deadline or a new timer
O(log n) (n: the timers of the broker), and firing a timer O(log n). Cancelled timers leave
their heap entry behind, to be dropped when it comes up.

With the default clock (the event loop's) the heap arms one loop timer for its earliest
entry and re-arms it after firing. With an injected clock nothing fires by itself: the
caller advances its clock and calls `run_due()` (tests: no sleeps).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable, Hashable


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class Timers:
    def __init__(self, clock: Callable[[], float] | None = None):
        """`clock()`: now in ms. None: the monotonic clock, fired by the running loop."""
        self.clock = clock or monotonic_ms
        self._by_loop = clock is None
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, tuple[float, Callable[[], None]]] = {}
        self._queued: dict[Hashable, float] = {}  # key -> its earliest heap entry
        self._seq = itertools.count()
        self._armed: asyncio.TimerHandle | None = None
        self._armed_at = float("inf")

    def now(self) -> float:
        return self.clock()

    def __len__(self) -> int:
        return len(self._due)

    def schedule(self, key: Hashable, delay_ms: float, fire: Callable[[], None]) -> None:
        """Call `fire()` `delay_ms` from now, replacing `key`'s timer. O(1) when the new
        deadline is not earlier than the key's queued one, else O(log n)."""
        deadline = self.clock() + delay_ms
        self._due[key] = (deadline, fire)
        queued = self._queued.get(key)
        if queued is None or deadline < queued:
            self._push(key, deadline)

    def cancel(self, key: Hashable) -> None:
        """O(1): the heap entry is dropped when it comes up."""
        self._due.pop(key, None)

    def deadline(self, key: Hashable) -> float | None:
        found = self._due.get(key)
        return None if found is None else found[0]

    def run_due(self) -> int:
        """Fire every timer whose deadline has passed, earliest first; how many fired.
        A timer scheduled by a callback for now or earlier fires in the same call."""
        fired = 0
        while self._heap and self._heap[0][0] <= self.clock():
            at, _, key = heapq.heappop(self._heap)
            if self._queued.get(key) != at:
                continue  # superseded by an earlier entry of the same key
            del self._queued[key]
            due = self._due.get(key)
            if due is None:
                continue  # cancelled
            if due[0] > at:  # moved later since it was queued
                self._push(key, due[0])
                continue
            del self._due[key]
            fired += 1
            due[1]()
        return fired

    def close(self) -> None:
        if self._armed is not None:
            self._armed.cancel()
        self._armed, self._armed_at = None, float("inf")
        self._heap.clear()
        self._due.clear()
        self._queued.clear()

    def _push(self, key: Hashable, deadline: float) -> None:
        self._queued[key] = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        if self._by_loop and deadline < self._armed_at:
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        if self._armed is not None:
            self._armed.cancel()
        loop = asyncio.get_running_loop()
        self._armed_at = deadline
        self._armed = loop.call_later(max(deadline - self.clock(), 0) / 1000, self._on_loop)

    def _on_loop(self) -> None:
        self._armed, self._armed_at = None, float("inf")
        self.run_due()
        if self._heap and self._heap[0][0] < self._armed_at:
            self._arm(self._heap[0][0])
