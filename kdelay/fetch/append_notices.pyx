# cython: language_level=3
"""AppendNotices: what a Log tells the rest once an append lands. Under the log's lock,
the fetches waiting on it (their ActivitySignal, and the due-order reader's quiet spell,
its QuietGate, which a batch due sooner ends); after the lock is released, the append
listeners (a Topic's, waking consumers that long-poll several partitions). O(1) plus the
listeners.

Compiled, so that an append (the facade's append, facade_calls.pyx) tells the quiet
gate and checks for sleeping long polls in C, with no Python frame."""

from collections.abc import Callable

from cpython.list cimport PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int64_t

from kdelay.fetch.quiet_gate cimport QuietGate

from kdelay.records import AppendResult
from kdelay.fetch.long_poll import ActivitySignal

AppendListener = Callable[[AppendResult], None]


cdef class AppendNotices:
    # (its fields are declared in append_notices.pxd)

    def __init__(self, lock, due_order):
        self.signal = ActivitySignal(lock)  # wakes long-polling fetches; close bumps it
        self.listeners = []
        self._gate = due_order.gate

    @property
    def signal(self):
        """The long_poll.ActivitySignal that long-polling fetches sleep on."""
        return self._signal

    @signal.setter
    def signal(self, signal):
        self._signal, self._sleepers = signal, signal.sleepers

    cpdef object under_lock(self, object result):
        """Wake long-polling fetches that the batch is due before they would wake."""
        deliver_after = <object>PyTuple_GET_ITEM(result, 2)  # AppendResult.deliver_after
        self._gate.appended(deliver_after)  # an idle poll's quiet spell may end
        # (long_poll.due_in_ms: deliver_after - append_time, in C: both are int64)
        cdef int64_t due_in = <int64_t>deliver_after - <int64_t>(
            <object>PyTuple_GET_ITEM(result, 3))
        if due_in <= 0 or PyList_GET_SIZE(self._sleepers):  # no call when none waits for later
            self._signal.comes_due_under_lock(due_in)
        return result

    cpdef object after(self, object result):
        """Tell the listeners (call outside the log's lock)."""
        for listener in self.listeners:
            listener(result)
        return result
