"""Consumer: close(), the context manager, and iteration (`for rec in consumer:`) with
kafka-python's consumer_timeout_ms, over a Log and over a Topic."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import T0

from kdelay import Consumer, KdelayError, Log, Record, Topic
from kdelay.errors import LogClosedError


@pytest.fixture
def log(open_log) -> Log:
    return open_log()  # conftest's: a fresh log on the fake clock, closed at teardown


def test_iterates_due_records_in_order_then_stops(log, clock) -> None:
    for i, da in enumerate([30, 10, 20, 99]):
        log.append(Record(b"%d" % i), deliver_after=T0 + da)
    clock.t = T0 + 50
    start = time.monotonic()
    with Consumer(log, "g", consumer_timeout_ms=100) as c:
        assert [r.value for r in c] == [b"1", b"2", b"0"]  # 3 not due on the fake clock
    assert 0.09 <= time.monotonic() - start < 5


def test_the_timeout_counts_from_the_last_record(log) -> None:
    """consumer_timeout_ms is the time without a record, not the whole iteration's."""
    def produce() -> None:
        for i in range(3):
            time.sleep(0.06)
            log.append(Record(b"%d" % i))

    t = threading.Thread(target=produce)
    t.start()
    with Consumer(log, "g", consumer_timeout_ms=400) as c:
        got = [r.value for r in c]
    t.join()
    assert got == [b"0", b"1", b"2"]


def test_waits_for_a_record_to_come_due(tmp_path) -> None:
    with Log.open(str(tmp_path / "w-0")) as log:  # the wall clock
        log.append(Record(b"later"), delay_ms=150)
        start = time.monotonic()
        with Consumer(log, "g", consumer_timeout_ms=3000) as c:
            rec = next(iter(c))
        assert rec.value == b"later" and time.monotonic() - start >= 0.14
        assert rec.deliver_after <= log.now()


def test_no_timeout_iterates_until_broken_out_of(log) -> None:
    log.append([Record(b"a"), Record(b"b")])
    c = Consumer(log, "g")
    assert c.consumer_timeout_ms is None
    got = []
    for rec in c:
        got.append(rec.value)
        if len(got) == 2:
            break
    assert got == [b"a", b"b"]


def test_a_commit_mid_iteration_stores_only_what_was_yielded(log) -> None:
    log.append([Record(b"%d" % i) for i in range(5)])
    with Consumer(log, "g", consumer_timeout_ms=0) as c:
        it = iter(c)
        next(it), next(it)
        c.commit()
        assert c.committed == [(T0, 1)]
    with Consumer(log, "g", consumer_timeout_ms=0) as again:  # as after a restart
        assert [r.offset for r in again] == [2, 3, 4]


def test_poll_after_iteration_continues_after_the_last_yielded(log) -> None:
    log.append([Record(b"%d" % i) for i in range(5)])
    c = Consumer(log, "g", consumer_timeout_ms=0)
    next(c)
    assert [r.offset for r in c.poll()] == [1, 2, 3, 4]
    assert list(c) == []  # nothing repeated from the page the iteration had read ahead
    c.rewind()
    assert [r.offset for r in c] == [0, 1, 2, 3, 4]


def test_a_topic_iterates_every_partition(tmp_path, clock) -> None:
    with Topic.open(str(tmp_path), "t", partitions=3, clock=clock) as topic:
        for i in range(30):
            topic.send(Record(b"%d" % i, key=b"k%d" % i))
        with Consumer(topic, "g", consumer_timeout_ms=0) as c:
            got = list(c)
            c.commit()
        assert sorted(int(r.value) for r in got) == list(range(30))
        assert {r.partition for r in got} == {0, 1, 2}
        with Consumer(topic, "g", consumer_timeout_ms=0) as again:
            assert list(again) == []


def test_a_topic_iteration_wakes_for_an_append(tmp_path) -> None:
    with Topic.open(str(tmp_path), "t", partitions=3) as topic:
        timer = threading.Timer(0.1, lambda: topic.send(Record(b"x", key=b"k")))
        timer.start()
        with Consumer(topic, "g", consumer_timeout_ms=3000) as c:
            start = time.monotonic()
            rec = next(c)
        timer.join()
        assert rec.value == b"x" and time.monotonic() - start < 2


def test_after_close_every_call_is_refused(log) -> None:
    log.append(Record(b"x"))
    with Consumer(log, "g") as c:
        assert not c.closed
    assert c.closed
    for call in (c.poll, c.commit, c.rewind, lambda: next(c),
                 lambda: c.retry(log.read(0)[0])):
        with pytest.raises(LogClosedError):
            call()
    c.close()  # again: nothing


def test_close_does_not_commit(log) -> None:
    log.append(Record(b"x"))
    with Consumer(log, "g") as c:
        assert len(c.poll()) == 1
    assert log.committed("g") is None


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_bad_consumer_timeout(log, bad) -> None:
    with pytest.raises(KdelayError, match="consumer_timeout_ms"):
        Consumer(log, "g", consumer_timeout_ms=bad)
