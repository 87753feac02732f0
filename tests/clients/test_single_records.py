"""One record wherever a sequence of records is taken: log.append, topic.send, and a
QueueConsumer's ack, release, reject and renew. Bytes are not a record: refused clearly."""

from __future__ import annotations

import pytest
from conftest import T0

from kdelay import InvalidRecordError, KdelayError, Log, QueueConsumer, Record, Topic


@pytest.fixture
def log(open_log) -> Log:
    return open_log()  # conftest's: a fresh log on the fake clock, closed at teardown


def test_append_one_record(log) -> None:
    res = log.append(Record(b"v", key=b"k", headers=[("h", b"1")], timestamp=5,
                            deliver_after=T0 + 10))
    assert (res.base_offset, res.last_offset, res.deliver_after) == (0, 0, T0 + 10)
    (rec,) = log.read(0)
    assert (rec.value, rec.key, rec.headers, rec.timestamp) == (b"v", b"k", [("h", b"1")], 5)


def test_append_one_record_as_a_list_would(log) -> None:
    """A single Record is exactly a batch of one."""
    one = log.append(Record(b"x"), deliver_after=T0 + 3)
    listed = log.append([Record(b"x")], deliver_after=T0 + 3)
    assert one.deliver_after == listed.deliver_after
    a, b = log.read(0)
    assert a[2:] == b[2:]


@pytest.mark.parametrize("bad", [b"x", bytearray(b"x"), memoryview(b"x")])
def test_bytes_are_not_a_record(log, bad) -> None:
    with pytest.raises(InvalidRecordError, match=r"Record\(value\)"):
        log.append(bad)
    assert log.log_end_offset == 0


def test_a_bad_single_record_is_refused(log) -> None:
    with pytest.raises(InvalidRecordError, match="value"):
        log.append(Record("not bytes"))
    assert log.log_end_offset == 0


def test_send_one_record_goes_by_its_key(tmp_path, clock) -> None:
    with Topic.open(str(tmp_path), "t", partitions=4, clock=clock) as topic:
        p_one, _ = topic.send(Record(b"v", key=b"user-7"))
        p_list, _ = topic.send([Record(b"v", key=b"user-7")])
        assert p_one == p_list == topic.partition_for(b"user-7")
        assert topic.partition(p_one).log_end_offset == 2
        with pytest.raises(InvalidRecordError, match=r"Record\(value\)"):
            topic.send(b"v")


def test_queue_calls_take_one_record(log, clock) -> None:
    for i in range(4):
        log.append(Record(b"%d" % i))
    dead = Log.open(str(log.path) + "-dead", clock=clock)
    try:
        with QueueConsumer(log, "g", dead_letter=dead, lock_ms=100) as q:
            a, _, _, _ = q.poll()
            clock.advance(60)
            q.renew(a)  # to 160; the others' locks run out at 100
            clock.advance(60)
            q.ack(a)
            b, c, d = q.poll()
            assert [r.delivery_count for r in (b, c, d)] == [2, 2, 2]
            q.reject(b)
            q.release(c, delay_ms=5)
            q.ack(d)
            assert dead.read(0)[0].value == b"1"
            counts = log.metrics()["queues"]["g"]
            assert (counts["acked"], counts["rejected"], counts["delayed"]) == (2, 1, 1)
            clock.advance(5)
            assert q.poll()[0].value == b"2"
    finally:
        dead.close()


def test_queue_calls_refuse_bytes_and_other_things(log) -> None:
    log.append(Record(b"x"))
    with QueueConsumer(log, "g") as q:
        (rec,) = q.poll()
        for bad in (b"x", "x", 5, Record(b"x")):
            with pytest.raises(KdelayError, match="QueueConsumer|QueueRecord"):
                q.ack(bad)
        q.ack(rec)  # nothing was changed by the refusals
