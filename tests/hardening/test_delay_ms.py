"""validation.deliver_after_for_delay: a relative delay_ms becomes the log clock at the call
plus the delay; both ways at once, or a delay_ms that is not a non-negative int (or that
takes the time past 2**63 - 1), is refused with the caller's error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdelay import InvalidRecordError, KdelayError
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
    """reschedule refuses with a plain KdelayError (API.md), not InvalidRecordError."""
    with pytest.raises(KdelayError) as e:
        deliver_after_for_delay(5, 1, 0, error=KdelayError)
    assert type(e.value) is KdelayError
