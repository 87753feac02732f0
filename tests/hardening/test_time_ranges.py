"""Times and delays at the edge of int64 (issue 26, point 4).

Every time a file holds is an int64 (ms since the epoch): a delay added to the log clock
must not take it past 2**63 - 1. Each client refuses such a delay with a KdelayError at
the call and writes nothing (never struct.error, never a clamped time): QueueConsumer's
release delay_ms, lock_ms and renew; Consumer.retry's delay_ms and its default backoff.
Times given whole (deliver_after, timestamps, commit keys, reschedule times) are accepted
up to 2**63 - 1, read back as given, and refused beyond. A wait longer than the platform's
longest sleep is a long wait, not an OverflowError.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import T0, FakeClock
from hypothesis import given
from hypothesis import strategies as st

from kdelay import (
    Consumer,
    DeliveryKey,
    InvalidRecordError,
    KdelayError,
    Log,
    QueueConsumer,
    Record,
    Topic,
)
from kdelay.clients.consumer import backoff_ms
from kdelay.testing.checks import files_under
from kdelay.validation import MAX_INT64, time_after

# ---------------------------------------------------------------------- the rule


@given(st.integers(0, MAX_INT64), st.integers(0, MAX_INT64))
def test_time_after_is_the_sum_or_refused(now: int, delay: int) -> None:
    if now + delay > MAX_INT64:
        with pytest.raises(InvalidRecordError, match="past"):
            time_after(now, delay, "delay_ms", InvalidRecordError)
    else:
        assert time_after(now, delay, "delay_ms") == now + delay


@given(st.integers(0, MAX_INT64), st.floats(1, 1e6), st.integers(0, MAX_INT64),
       st.integers(1, 10 ** 6), st.floats(0, 1))
def test_backoff_stays_within_its_maximum(base: int, factor: float, top: int, attempt: int,
                                          jitter: float) -> None:
    """Float arithmetic neither overflows (a large factor ** attempt) nor takes the backoff
    past max_ms (float(2**63 - 1) rounds up to 2**63)."""
    assert 0 <= backoff_ms(attempt, base_ms=base, factor=factor, max_ms=top,
                           jitter=jitter) <= top


# ---------------------------------------------------------------------- queue consumers


def queue_setup(tmp_path, lock_ms: int = 30_000):
    clock = FakeClock()
    log = Log.open(tmp_path / "p", clock=clock)
    for i in range(3):
        log.append([Record(b"v%d" % i)])
    q = QueueConsumer(log, "g", lock_ms=lock_ms)
    return clock, log, q, q.poll(3)


@pytest.mark.parametrize("delay", [MAX_INT64, MAX_INT64 - T0 + 1, 2 ** 63 - 2 ** 40])
def test_a_release_past_int64_is_refused(tmp_path, delay: int) -> None:
    clock, log, q, recs = queue_setup(tmp_path)
    before = files_under(str(tmp_path))
    with pytest.raises(KdelayError, match="delay_ms"):
        q.release(recs, delay_ms=delay)
    assert files_under(str(tmp_path)) == before
    q.ack(recs)  # still held: nothing changed
    q.close()
    log.close()


def test_a_release_to_the_last_ms_is_kept(tmp_path) -> None:
    """The largest delay that fits: stored, and read back after a reopen (delayed forever)."""
    clock, log, q, recs = queue_setup(tmp_path)
    q.release(recs[:1], delay_ms=MAX_INT64 - T0)
    q.ack(recs[1:])
    q.close()
    log.close()
    with Log.open(tmp_path / "p", clock=FakeClock(T0 + 10)) as log:
        counts = log.metrics()["queues"]["g"]
        assert (counts["delayed"], counts["acked"]) == (1, 2)
        q = QueueConsumer(log, "g")
        assert q.poll(10) == []
        q.close()


def test_lock_ms_past_int64_is_refused(tmp_path) -> None:
    with Log.open(tmp_path / "p", clock=FakeClock()) as log:
        with pytest.raises(KdelayError, match="lock_ms"):
            QueueConsumer(log, "g", lock_ms=MAX_INT64 - T0 + 1)
        QueueConsumer(log, "g", lock_ms=MAX_INT64 - T0).close()
    with Topic.open(tmp_path, "t", partitions=2, clock=FakeClock()) as topic, \
            pytest.raises(KdelayError, match="lock_ms"):
        QueueConsumer(topic, "g", lock_ms=MAX_INT64)


def test_a_renew_past_int64_is_refused(tmp_path) -> None:
    """A lock that fitted when taken, renewed once the clock has moved on: refused, and the
    record is still held under its old lock."""
    clock, log, q, recs = queue_setup(tmp_path, lock_ms=MAX_INT64 - T0)
    clock.t += 1
    with pytest.raises(KdelayError, match="lock_ms"):
        q.renew(recs)
    q.ack(recs)
    q.close()
    log.close()


# ---------------------------------------------------------------------- Consumer.retry


def test_a_retry_delay_past_int64_is_refused(tmp_path) -> None:
    with Log.open(tmp_path / "p", clock=FakeClock()) as log:
        log.append([Record(b"job")])
        c = Consumer(log, "g")
        (rec,) = c.poll()
        before = files_under(str(tmp_path))
        with pytest.raises(InvalidRecordError, match="delay_ms"):
            c.retry(rec, delay_ms=MAX_INT64 - T0 + 1)
        assert files_under(str(tmp_path)) == before
        assert c.retry(rec, delay_ms=MAX_INT64 - T0).result.deliver_after == MAX_INT64


def test_a_default_backoff_past_int64_is_refused(tmp_path) -> None:
    """A backoff maximum the log clock cannot add: the retry is refused, nothing written."""
    with Log.open(tmp_path / "p", clock=FakeClock()) as log:
        log.append([Record(b"job")])
        c = Consumer(log, "g", backoff_base_ms=MAX_INT64, backoff_max_ms=MAX_INT64)
        (rec,) = c.poll()
        before = files_under(str(tmp_path))
        with pytest.raises(InvalidRecordError, match="delay_ms"):
            c.retry(rec)
        assert files_under(str(tmp_path)) == before


# ---------------------------------------------------------------------- whole times


def test_whole_times_up_to_the_last_ms(tmp_path) -> None:
    """deliver_after, timestamps (both ends in one batch), commit keys and reschedule
    times of 2**63 - 1 are kept and read back; 2**63 is refused and writes nothing."""
    path = tmp_path / "p"
    with Log.open(path, clock=FakeClock()) as log:
        a = log.append([Record(b"a", timestamp=0), Record(b"b", timestamp=MAX_INT64)],
                       deliver_after=MAX_INT64)
        b = log.append([Record(b"c")], deliver_after=T0 + 5)
        moved = log.reschedule(b.base_offset, MAX_INT64)
        log.commit("g", DeliveryKey(MAX_INT64, MAX_INT64))
        before = files_under(str(tmp_path))
        for call in (lambda: log.append([Record(b"x")], deliver_after=MAX_INT64 + 1),
                     lambda: log.append([Record(b"x", timestamp=MAX_INT64 + 1)]),
                     lambda: log.reschedule(moved.base_offset, MAX_INT64 + 1),
                     lambda: log.commit("g", DeliveryKey(MAX_INT64 + 1, 0))):
            with pytest.raises(KdelayError):
                call()
        assert files_under(str(tmp_path)) == before
    with Log.open(path, clock=FakeClock()) as log:
        got = log.read(0)
        assert [(r.timestamp, r.deliver_after) for r in got[:2]] == [(0, MAX_INT64),
                                                                    (MAX_INT64, MAX_INT64)]
        assert got[3].offset == moved.base_offset and got[3].deliver_after == MAX_INT64
        assert a.deliver_after == MAX_INT64
        assert log.committed("g") == DeliveryKey(MAX_INT64, MAX_INT64)


# ---------------------------------------------------------------------- waits


def _append_soon(log: Log) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(0.05), log.append([Record(b"late")])))
    t.start()
    return t


@pytest.mark.parametrize("wait", [2 ** 63 - 1, 2 ** 64])
def test_a_wait_past_the_longest_sleep_is_a_long_wait(tmp_path, wait: int) -> None:
    """fetch, Consumer.poll over a Topic and QueueConsumer.poll with waits longer than
    threading.TIMEOUT_MAX: each returns the record appended while it waits."""
    with Log.open(tmp_path / "p") as log:
        t = _append_soon(log)
        assert [r.value for r in log.fetch(None, max_wait_ms=wait).records] == [b"late"]
        t.join()
        q = QueueConsumer(log, "g")
        assert len(q.poll(10)) == 1
        t = _append_soon(log)
        assert [r.offset for r in q.poll(10, timeout_ms=wait)] == [1]
        t.join()
        q.close()
    with Topic.open(tmp_path, "t", partitions=2) as topic:
        c = Consumer(topic, "g")
        t = _append_soon(topic.partition(1))
        assert [r.value for r in c.poll(timeout_ms=wait)] == [b"late"]
        t.join()
