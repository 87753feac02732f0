"""AppendNotices: what a Log tells the rest once an append lands. Under the log's lock,
the fetches waiting on it (their ActivitySignal, and the due-order reader's quiet spell,
its QuietGate, which a batch due sooner ends); after the lock is released, the append listeners (a
Topic's, waking consumers that long-poll several partitions). O(1) plus the listeners."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..records import AppendResult
from .due_order import DueOrderReader
from .long_poll import ActivitySignal, due_in_ms

AppendListener = Callable[[AppendResult], None]


class AppendNotices:
    def __init__(self, lock: threading.RLock, due_order: DueOrderReader):
        self.signal = ActivitySignal(lock)  # wakes long-polling fetches; close bumps it
        self.listeners: list[AppendListener] = []
        self._gate = due_order.gate

    def under_lock(self, result: AppendResult) -> AppendResult:
        """Wake long-polling fetches that the batch is due before they would wake."""
        self._gate.appended(result.deliver_after)  # an idle poll's quiet spell may end
        due_in = due_in_ms(result)
        if due_in <= 0 or self.signal.sleepers:  # no call when no fetch waits for later
            self.signal.comes_due_under_lock(due_in)
        return result

    def after(self, result: AppendResult) -> AppendResult:
        """Tell the listeners (call outside the log's lock)."""
        for listener in self.listeners:
            listener(result)
        return result
