"""Long polls: a read that, finding nothing, sleeps until something may have changed or its
time is up. One loop for every blocking read (Log.fetch, a Consumer over a Topic,
QueueConsumer.poll): each round looks at its sources, and an empty one sleeps on an
ActivitySignal, no longer than until the next record may come due on the log clock.

The signal is a version counter beside a condition: a waiter notes the version before its
round, so a bump (an append, a release, a close) made while it looks is never lost: the
wait that follows returns at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["MIN_WAIT_S", "ActivitySignal", "long_poll"]

T = TypeVar("T")

# the shortest sleep of an empty round: a wake-up time already reached (a record due now
# that a round did not return, e.g. one another consumer took) must not spin the CPU
MIN_WAIT_S = 0.001


class ActivitySignal:
    """A version counter plus condition, over `lock` (the lock of what it signals, so that
    a holder can bump it without taking it again) or a lock of its own."""

    def __init__(self, lock: threading.Lock | threading.RLock | None = None) -> None:
        self._cond = threading.Condition(lock)
        self.version = 0

    def bump(self) -> None:
        with self._cond:
            self.bump_under_lock()

    def bump_under_lock(self) -> None:
        """`bump`, by a caller that already holds the signal's lock."""
        self.version += 1
        self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep up to `timeout` seconds, unless the version moved past `seen` already (at
        most threading.TIMEOUT_MAX, ~292 years, which a longer wait would overflow: the
        caller's loop sleeps again)."""
        with self._cond:
            if self.version == seen:
                self._cond.wait(min(timeout, threading.TIMEOUT_MAX))


def long_poll(poll_once: Callable[[], tuple[T, bool]], next_due_ms: Callable[[], int | None],
              signal: ActivitySignal, deadline: float) -> T:
    """Call `poll_once()` -> (result, found) until it finds something or time.monotonic()
    reaches `deadline`; return its last result. Between rounds, sleep on `signal` until
    it is bumped, the deadline, or `next_due_ms()` ms from now (asked only before a sleep:
    when the next record may come due on the log clock; None: no such time), but at
    least MIN_WAIT_S."""
    while True:
        seen = signal.version  # before the round: a bump during it ends the sleep at once
        result, found = poll_once()
        remaining = deadline - time.monotonic()
        if found or remaining <= 0:
            return result
        due_ms = next_due_ms()
        if due_ms is not None:
            remaining = min(remaining, max(MIN_WAIT_S, due_ms / 1000))
        signal.wait(seen, remaining)
