"""fetch.long_poll: the one loop of every blocking read. It returns what a round found at
once, sleeps on its signal between empty rounds, wakes on a bump (also one made during a
round), returns at the deadline, and never sleeps less than MIN_WAIT_S: no busy spin."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay.fetch import long_poll as lp
from kdelay.fetch.long_poll import MIN_WAIT_S, ActivitySignal, long_poll


class FakeTime:
    """time.monotonic() for long_poll, moved on only by the signal's sleeps."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t


class CountingSignal(ActivitySignal):
    """An ActivitySignal whose sleeps take no real time: each advances the fake clock by
    its timeout (or returns at once when a bump came after `seen`), and is recorded."""

    def __init__(self, clock: FakeTime) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []
        self.started: list[float] = []  # the fake clock at each sleep

    def wait(self, seen: int, timeout: float, sleeper=None) -> None:
        assert len(self.waits) < 100_000, "spinning: sleeps that never move the clock on"
        self.waits.append(timeout)
        self.started.append(self.clock.t)
        if self.version == seen:
            self.clock.t += timeout


@pytest.fixture
def fake_time(monkeypatch):
    clock = FakeTime()
    monkeypatch.setattr(lp, "time", clock)
    return clock


def test_a_found_result_returns_without_sleeping(fake_time):
    signal = CountingSignal(fake_time)
    got = long_poll(lambda: ("page", True), lambda: 5, signal, fake_time.t + 10)
    assert got == "page" and signal.waits == []


def test_an_empty_round_past_the_deadline_returns_at_once(fake_time):
    signal = CountingSignal(fake_time)
    asked = []
    got = long_poll(lambda: ([], False), lambda: asked.append(1), signal, fake_time.t)
    assert got == [] and signal.waits == [] and asked == []  # next_due_ms only before a sleep


@settings(max_examples=200, deadline=None)
@given(timeout_ms=st.integers(0, 5_000),
       due_ms=st.one_of(st.none(), st.integers(-1_000, 10_000)),
       found_after=st.one_of(st.none(), st.integers(1, 50)))
def test_sleeps_until_due_or_deadline_never_spinning(timeout_ms, due_ms, found_after):
    """Whatever the next due time (None, in the past, now, later) and however long until a
    round finds something: every sleep lasts at least MIN_WAIT_S and at most until the due
    time or the deadline; the poll returns the first found result, or the last empty one
    once the deadline has passed, after about timeout / MIN_WAIT_S sleeps at most."""
    clock = FakeTime()
    old, lp.time = lp.time, clock
    try:
        signal = CountingSignal(clock)
        rounds = []

        def poll_once():
            rounds.append(clock.t)
            found = found_after is not None and len(rounds) > found_after
            return len(rounds), found

        start = clock.t
        deadline = start + timeout_ms / 1000
        got = long_poll(poll_once, lambda: due_ms, signal, deadline)
    finally:
        lp.time = old
    assert got == len(rounds) and len(signal.waits) == len(rounds) - 1
    for t, w in zip(signal.started, signal.waits, strict=True):
        assert w >= MIN_WAIT_S or t + w == pytest.approx(deadline)  # only cut by the deadline
        if due_ms is not None:
            assert w <= max(MIN_WAIT_S, due_ms / 1000) + 1e-9
    if found_after is None or found_after >= len(rounds):
        assert clock.t >= deadline  # gave up only at the deadline
    # + 2: the last sleep may be a sliver that float rounding left before the deadline
    assert len(signal.waits) <= timeout_ms / 1000 / MIN_WAIT_S + 2


def test_a_bump_during_a_round_is_not_lost(fake_time):
    """The version is noted before the round: a bump while the round looks (an append it
    missed) makes the sleep that follows return at once."""
    signal = CountingSignal(fake_time)
    rounds = []

    def poll_once():
        rounds.append(1)
        if len(rounds) == 1:
            signal.bump()  # as an append landing after the round looked
            return None, False
        return "after the append", True

    assert long_poll(poll_once, lambda: None, signal, fake_time.t + 60) == "after the append"
    assert fake_time.t == 1000.0  # the one sleep returned without waiting


def test_a_real_bump_wakes_a_sleeping_poll():
    signal = ActivitySignal()
    box: list[str] = []

    def poll_once():
        return (box[0], True) if box else (None, False)

    def producer():
        time.sleep(0.05)
        box.append("appended")
        signal.bump()

    t = threading.Thread(target=producer)
    start = time.monotonic()
    t.start()
    got = long_poll(poll_once, lambda: None, signal, start + 10)
    t.join()
    assert got == "appended" and time.monotonic() - start < 5


def test_a_real_poll_returns_at_its_deadline():
    signal = ActivitySignal()
    start = time.monotonic()
    assert long_poll(lambda: ("empty", False), lambda: None, signal, start + 0.1) == "empty"
    assert 0.1 <= time.monotonic() - start < 5


def test_bump_under_lock_by_a_holder_of_the_signals_lock():
    lock = threading.RLock()
    signal = ActivitySignal(lock)
    with lock:
        signal.bump_under_lock()
        signal.wait(0, 10)  # the version moved: returns at once, with the lock held
    assert signal.version == 1


# ---------------------------------------------------------------- appends due later


def test_comes_due_bumps_only_what_is_due_before_a_sleeper_wakes(fake_time):
    signal = ActivitySignal()
    with signal.watch() as sleeper:
        sleeper.wake_at = fake_time.t + 10  # as `wait` sets it: asleep until then
        signal.comes_due(60_000)  # due long after: no one to wake
        signal.comes_due(10_000)  # exactly at its wake-up: it wakes then anyway
        assert signal.version == 0
        signal.comes_due(9_000)  # before it would wake
        assert signal.version == 1
    signal.comes_due(1)  # no sleeper at all: nothing to do
    assert signal.version == 1
    signal.comes_due(0)  # due now: every later round must see it
    signal.comes_due(-5)
    assert signal.version == 3


def test_an_append_while_a_sleeper_works_out_its_wake_up_bounds_its_sleep():
    """Between `watch` and `wait` the poll asks next_due_ms, which may or may not see an
    append made meanwhile: the append is noted, and the sleep ends when it comes due."""
    signal = ActivitySignal()
    with signal.watch() as sleeper:
        signal.comes_due(250)  # while next_due_ms is looking
        signal.comes_due(900)
        assert signal.version == 0
        start = time.monotonic()
        signal.wait(0, 60.0, sleeper)
    assert 0.2 <= time.monotonic() - start < 5


def test_an_append_landing_while_the_poll_works_out_its_sleep_is_not_lost():
    """The interleaving the sleeper's note exists for: next_due_ms has looked (nothing
    pending) when an append due in 50 ms lands, before the poll goes to sleep."""
    signal = ActivitySignal()
    pending: list[float] = []

    def poll_once():
        due = [t for t in pending if t <= time.monotonic()]
        return len(due), bool(due)

    def next_due_ms():
        wait = None if not pending else (min(pending) - time.monotonic()) * 1000
        if not pending:  # another thread appends now
            pending.append(time.monotonic() + 0.05)
            signal.comes_due(50)
        return wait

    start = time.monotonic()
    assert long_poll(poll_once, next_due_ms, signal, start + 10) == 1
    assert time.monotonic() - start < 5  # not at the deadline


@settings(max_examples=20, deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0, 0, 1, 5, 60])),
                     min_size=1, max_size=25),
       looking_ms=st.sampled_from([0, 1, 2]))
def test_no_wake_up_is_lost_between_threads(plan, looking_ms):
    """An appender thread makes items available in `delay` ms (0: at once), sleeping 0-60
    ms between them (so the poll often has nothing pending when the next one comes), while
    a long poll with a 5 s deadline collects them; its next_due_ms
    takes `looking_ms` (a slow look at many partitions), during which appends land. Every
    poll returns items well before its deadline (sleeping to it would be a lost wake-up),
    and all arrive."""
    signal = ActivitySignal()
    lock = threading.Lock()
    pending: list[float] = []  # time.monotonic() at which each item is available

    def poll_once():
        with lock:
            now = time.monotonic()
            due = sum(1 for t in pending if t <= now)
            pending[:] = [t for t in pending if t > now]
            return due, due > 0

    def next_due_ms():
        with lock:
            wait = None if not pending else max(0.0, (min(pending) - time.monotonic()) * 1000)
        time.sleep(looking_ms / 1000)  # appends may land after the look, before the sleep
        return wait

    def appender():
        for delay, gap in plan:
            with lock:
                pending.append(time.monotonic() + delay / 1000)
            signal.comes_due(delay)
            time.sleep(gap / 1000)

    t = threading.Thread(target=appender)
    t.start()
    got = 0
    try:
        while got < len(plan):
            start = time.monotonic()
            n = long_poll(poll_once, next_due_ms, signal, start + 5)
            # items come due within 40 ms of their append, 60 ms apart at most: a poll
            # that slept (almost) to its deadline missed a wake-up
            assert n > 0 and time.monotonic() - start < 4, "a lost wake-up"
            got += n
    finally:
        t.join()
    assert got == len(plan)
