"""The log clock (kdelay/log/local/log_clock.pyx): the readings of the clock a log was opened
with, checked as validation.clock_value checks them, and never below a time it has already
handed out."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import KdelayError
from kdelay.log.local.log_clock import LogClock
from kdelay.validation import clock_value

T0 = 1_700_000_000_000
READINGS = st.one_of(st.integers(-5, 2 * T0), st.just(2**63 - 1), st.just(2**63),
                     st.just(-(2**63)), st.integers(0, T0).map(np.int64), st.just(True),
                     st.just(1.5), st.just(None), st.just("1"))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, T0), st.lists(READINGS, max_size=20))
def test_now_is_the_largest_good_reading_so_far_and_a_bad_one_raises(floor, readings):
    it = iter(readings)
    clock = LogClock(lambda: next(it), floor)
    expected = floor
    for r in readings:
        try:
            want = max(expected, clock_value(r))  # the rule, as the Python path states it
        except KdelayError:
            with pytest.raises(KdelayError):
                clock.now()
            assert clock.floor == expected  # nothing handed out
            continue
        got = clock()
        assert type(got) is int and got == want == clock.floor
        expected = want


def test_an_error_of_the_clock_itself_propagates():
    def broken() -> int:
        raise OSError("no time")

    clock = LogClock(broken, 5)
    with pytest.raises(OSError):
        clock.now()
    assert clock.floor == 5


def test_threads_raising_the_floor_at_once_leave_the_largest():
    readings = [T0 + i for i in range(20_000)]
    it = iter(readings)
    lock = threading.Lock()

    def read() -> int:
        with lock:
            return next(it)

    clock = LogClock(read)
    seen: list[list[int]] = [[] for _ in range(4)]

    def run(out: list[int]) -> None:
        for _ in range(5_000):
            out.append(clock.now())

    threads = [threading.Thread(target=run, args=(out,)) for out in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.floor == readings[-1]
    for out in seen:  # each thread's view never runs backwards
        assert out == sorted(out)
