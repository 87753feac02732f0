"""Long polls: a read that, finding nothing, sleeps until something may have changed or its
time is up. One loop for every blocking read (Log.fetch, a Consumer over a Topic,
QueueConsumer.poll): each round looks at its sources, and an empty one sleeps on an
ActivitySignal, no longer than until the next record may come due on the log clock.

The signal is a version counter beside a condition: a waiter notes the version before its
round, so a bump (an append due now, a release, a close) made while it looks is never
lost: the wait that follows returns at once.

An append due later wakes no one who will wake by then anyway: each sleeper registers
(`watch`) before it works out when to wake, and `comes_due` bumps only when something
comes due before some sleeper's wake-up. An append made while a sleeper is still working
that out is noted on it, and its sleep ends no later than that append comes due. So an
idle consumer sleeps through a stream of appends due a minute later, at no cost to them.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..records import AppendResult

__all__ = ["MIN_WAIT_S", "ActivitySignal", "Sleeper", "due_in_ms", "long_poll"]

T = TypeVar("T")

# the shortest sleep of an empty round: a wake-up time already reached (a record due now
# that a round did not return, e.g. one another consumer took) must not spin the CPU
MIN_WAIT_S = 0.001


def due_in_ms(result: AppendResult) -> int:
    """How long after it was made an append comes due (0: at once), on the log clock."""
    return result.deliver_after - result.append_time


class Sleeper:
    """One long poll's sleep on a signal: when it wakes by itself (time.monotonic(); None
    while it is still working that out), and the earliest time something appended
    meanwhile comes due (inf: nothing was)."""

    __slots__ = ("wake_at", "sooner")

    def __init__(self) -> None:
        self.wake_at: float | None = None
        self.sooner = math.inf


class ActivitySignal:
    """A version counter plus condition, over `lock` (the lock of what it signals, so that
    a holder can bump it without taking it again) or a lock of its own, and its sleepers."""

    def __init__(self, lock: threading.Lock | threading.RLock | None = None) -> None:
        self._cond = threading.Condition(lock)
        self.version = 0
        # the long polls asleep on it (an append skips `comes_due_under_lock` when none are;
        # changed only in place: the append's notices hold this list)
        self.sleepers: list[Sleeper] = []
        self._waiting = 0  # threads inside the condition's wait

    def bump(self) -> None:
        with self._cond:
            self.bump_under_lock()

    def bump_under_lock(self) -> None:
        """`bump`, by a caller that already holds the signal's lock."""
        self.version += 1
        if self._waiting:  # (notify_all costs ~0.3 us even with no one to wake)
            self._cond.notify_all()

    def comes_due(self, due_in: int) -> None:
        """Something becomes available in `due_in` ms (<= 0: now)."""
        with self._cond:
            self.comes_due_under_lock(due_in)

    def comes_due_under_lock(self, due_in: int) -> None:
        """`comes_due` by a holder of the signal's lock: a bump if it is due now or before
        some sleeper wakes (log-clock ms taken as real time, as every long poll's sleep
        takes them), else only noted on the sleepers still working out their wake-up."""
        if due_in <= 0:
            self.bump_under_lock()
            return
        if not self.sleepers:
            return
        at = time.monotonic() + due_in / 1000
        for sleeper in self.sleepers:
            if sleeper.wake_at is None:
                sleeper.sooner = min(sleeper.sooner, at)
            elif at < sleeper.wake_at:
                self.bump_under_lock()
                return

    @contextlib.contextmanager
    def watch(self) -> Iterator[Sleeper]:
        """A sleeper registered for the block: from its start, what `comes_due` is held
        against its wake-up (pass it to `wait`)."""
        sleeper = Sleeper()
        with self._cond:
            self.sleepers.append(sleeper)
        try:
            yield sleeper
        finally:
            with self._cond:
                self.sleepers.remove(sleeper)

    def wait(self, seen: int, timeout: float, sleeper: Sleeper | None = None) -> None:
        """Sleep up to `timeout` seconds, unless the version moved past `seen` already;
        as `sleeper` (from `watch`), no later than something appended meanwhile comes due,
        and woken early by `comes_due` only for something due before then."""
        with self._cond:
            if self.version != seen:
                return
            if sleeper is not None:
                now = time.monotonic()
                sleeper.wake_at = min(now + timeout, sleeper.sooner)
                timeout = sleeper.wake_at - now
                if timeout <= 0:
                    return
            # at most threading.TIMEOUT_MAX (~292 years), which a longer wait would
            # overflow: the caller's loop sleeps again
            self._waiting += 1
            try:
                self._cond.wait(min(timeout, threading.TIMEOUT_MAX))
            finally:
                self._waiting -= 1


def long_poll(poll_once: Callable[[], tuple[T, bool]], next_due_ms: Callable[[], int | None],
              signal: ActivitySignal, deadline: float) -> T:
    """Call `poll_once()` -> (result, found) until it finds something or time.monotonic()
    reaches `deadline`; return its last result. Between rounds, sleep on `signal` until
    it is bumped, the deadline, or `next_due_ms()` ms from now (asked only before a sleep:
    when the next record may come due on the log clock; None: no such time), but at
    least MIN_WAIT_S. An append due later wakes it only if due before it would wake
    anyway (ActivitySignal.comes_due)."""
    while True:
        seen = signal.version  # before the round: a bump during it ends the sleep at once
        result, found = poll_once()
        remaining = deadline - time.monotonic()
        if found or remaining <= 0:
            return result
        # registered before next_due_ms looks: an append it may miss is noted on the sleeper
        with signal.watch() as sleeper:
            due_ms = next_due_ms()
            if due_ms is not None:
                remaining = min(remaining, max(MIN_WAIT_S, due_ms / 1000))
            signal.wait(seen, remaining, sleeper)
