"""validation.deliver_after_for_delay: a relative delay_ms becomes the log clock at the call
plus the delay; both ways at once, or a delay_ms that is not a non-negative int (or that
takes the time past 2**63 - 1), is refused with the caller's error. Then each entry point
(log.append, topic.send, log/topic.reschedule): due at the log clock plus the delay, and a
refusal writes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import T0
from hypothesis import given
from hypothesis import strategies as st

from kdelay import InvalidRecordError, KdelayError, Log, LogConfig, Record, Topic
from kdelay.validation import MAX_INT64, deliver_after_for_delay

times = st.integers(0, MAX_INT64)


@given(times, st.integers(0, MAX_INT64))
def test_the_due_time_is_now_plus_the_delay(now, delay) -> None:
    if delay > MAX_INT64 - now:
        with pytest.raises(InvalidRecordError, match="past"):
            deliver_after_for_delay(None, delay, now)
    else:
        due = deliver_after_for_delay(None, delay, now)
        assert due == now + delay and type(due) is int


def test_a_numpy_delay_is_an_int() -> None:
    due = deliver_after_for_delay(None, np.int32(7), 100)
    assert due == 107 and type(due) is int


@pytest.mark.parametrize("delay", [-1, 1.0, "5", True, None, b"1", 1 << 64])
def test_not_a_non_negative_int(delay) -> None:
    with pytest.raises(InvalidRecordError, match="delay_ms"):
        deliver_after_for_delay(None, delay, 100)


@given(times, st.integers(0, 10 ** 6))
def test_both_ways_at_once_are_refused(deliver_after, delay) -> None:
    with pytest.raises(InvalidRecordError, match="not both"):
        deliver_after_for_delay(deliver_after, delay, 0)


def test_the_callers_error() -> None:
    """reschedule refuses with a plain KdelayError (docs/api.md), not InvalidRecordError."""
    with pytest.raises(KdelayError) as e:
        deliver_after_for_delay(5, 1, 0, error=KdelayError)
    assert type(e.value) is KdelayError


# ---------------------------------------------------------------- the entry points

BAD_DELAYS = [-1, 1.5, "5", True, b"1", MAX_INT64]  # MAX_INT64: the sum passes int64


@pytest.fixture
def log(open_log) -> Log:
    return open_log()  # conftest's: a fresh log on the fake clock, closed at teardown


@pytest.fixture
def topic(tmp_path, clock):
    with Topic.open(str(tmp_path), "t", partitions=2, clock=clock) as topic:
        yield topic


def test_append_is_due_at_the_log_clock_plus_the_delay(log, clock) -> None:
    clock.t = T0 + 500
    res = log.append([Record(b"x")], delay_ms=1000)
    assert res.deliver_after == T0 + 1500
    clock.t = T0 + 1499
    assert log.fetch().records == []
    clock.t = T0 + 1500
    assert [r.value for r in log.fetch().records] == [b"x"]


def test_append_delay_zero_is_due_now(log) -> None:
    assert log.append([Record(b"x")], delay_ms=0).deliver_after == T0
    assert len(log.fetch().records) == 1


def test_the_log_clock_not_the_wall_clock(log, clock) -> None:
    log.now()
    clock.t = T0 - 10_000  # the clock steps back: the log clock does not
    assert log.append([Record(b"x")], delay_ms=5).deliver_after == T0 + 5


@pytest.mark.parametrize("delay", BAD_DELAYS)
def test_append_bad_delay_writes_nothing(log, delay) -> None:
    with pytest.raises(InvalidRecordError, match="delay_ms"):
        log.append([Record(b"x")], delay_ms=delay)
    assert log.log_end_offset == 0


def test_append_both_writes_nothing(log) -> None:
    with pytest.raises(InvalidRecordError, match="not both"):
        log.append([Record(b"x")], deliver_after=T0, delay_ms=5)
    assert log.log_end_offset == 0


def test_append_on_a_fifo_log_refuses_a_delay(tmp_path, clock) -> None:
    from kdelay import DelayedDeliveryDisabledError
    with Log.open(str(tmp_path / "f-0"), config=LogConfig(delayed_delivery_enable=False),
                  clock=clock) as fifo:
        with pytest.raises(DelayedDeliveryDisabledError):
            fifo.append([Record(b"x")], delay_ms=5)
        assert fifo.log_end_offset == 0


def test_append_delay_over_the_limit(tmp_path, clock) -> None:
    from kdelay import DeliveryDelayExceededError
    with Log.open(str(tmp_path / "l-0"), config=LogConfig(max_delivery_delay_ms=100),
                  clock=clock) as limited:
        assert limited.append([Record(b"x")], delay_ms=100).deliver_after == T0 + 100
        with pytest.raises(DeliveryDelayExceededError):
            limited.append([Record(b"x")], delay_ms=101)
        assert limited.log_end_offset == 1


def test_send_is_due_at_the_log_clock_plus_the_delay(topic, clock) -> None:
    clock.t = T0 + 7
    p, res = topic.send([Record(b"x", key=b"k")], delay_ms=30)
    assert res.deliver_after == T0 + 37
    assert topic.partition(p).read(0)[0].value == b"x"


@pytest.mark.parametrize("delay", BAD_DELAYS)
def test_send_bad_delay_writes_nothing(topic, delay) -> None:
    with pytest.raises(InvalidRecordError, match="delay_ms"):
        topic.send([Record(b"x")], delay_ms=delay)
    with pytest.raises(InvalidRecordError, match="not both"):
        topic.send([Record(b"x")], delay_ms=1, deliver_after=T0)
    assert [topic.partition(i).log_end_offset for i in range(2)] == [0, 0]


def test_reschedule_moves_to_the_log_clock_plus_the_delay(log, clock) -> None:
    log.append([Record(b"x")], deliver_after=T0 + 100)
    clock.t = T0 + 50
    res = log.reschedule(0, delay_ms=200)
    assert res.deliver_after == T0 + 250 and res.base_offset == 1
    clock.t = T0 + 249
    assert log.fetch().records == []
    clock.t = T0 + 250
    assert [r.offset for r in log.fetch().records] == [1]


@pytest.mark.parametrize("delay", BAD_DELAYS)
def test_reschedule_bad_delay_changes_nothing(log, delay) -> None:
    log.append([Record(b"x")], deliver_after=T0 + 100)
    with pytest.raises(KdelayError, match="delay_ms"):
        log.reschedule(0, delay_ms=delay)
    with pytest.raises(KdelayError, match="not both"):
        log.reschedule(0, T0 + 5, delay_ms=1)
    with pytest.raises(KdelayError):
        log.reschedule(0)  # neither
    assert log.log_end_offset == 1 and log.metrics()["cancelled_records"] == 0


def test_topic_reschedule_takes_a_delay(topic, clock) -> None:
    p, _ = topic.send([Record(b"x")], delay_ms=100)
    res = topic.reschedule(p, 0, delay_ms=10)
    assert res.deliver_after == T0 + 10 and res.base_offset == 1
