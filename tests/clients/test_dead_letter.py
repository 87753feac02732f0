"""Dead-lettered records keep key, value, headers and timestamp, and carry their origin in
kdelay.dlq.* headers: both reasons, from a Log and from a Topic, into a one-partition
dead-letter Topic consumed back."""

from __future__ import annotations

import pytest
from conftest import T0, FakeClock
from hypothesis import given
from hypothesis import strategies as st

from kdelay import Consumer, Log, QueueConsumer, Record, Topic
from kdelay.clients.dead_letter import dead_letter_copy
from kdelay.records import FetchedRecord


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def dead(tmp_path, clock):
    with Topic.open(str(tmp_path / "dl"), "jobs.dlq", partitions=1, clock=clock) as dead:
        yield dead


def origin(rec) -> dict[str, bytes]:
    return {k: v for k, v in rec.headers if k.startswith("kdelay.dlq.")}


def dead_letters(dead: Topic) -> list:
    with Consumer(dead, "read-back", consumer_timeout_ms=0) as c:
        return list(c)


def test_rejected_from_a_log(tmp_path, clock, dead) -> None:
    with Log.open(str(tmp_path / "jobs-0"), clock=clock) as log:
        log.append([Record(b"a", key=b"k1", headers=[("trace", b"t1")], timestamp=T0 - 5),
                    Record(b"b", key=b"k2", timestamp=T0 - 4)])
        clock.advance(10)
        with QueueConsumer(log, "workers", dead_letter=dead) as q:
            a, b = q.poll()
            q.release(b)
            q.poll()
            q.reject(a)
    (copy,) = dead_letters(dead)
    assert (copy.key, copy.value, copy.timestamp) == (b"k1", b"a", T0 - 5)
    assert copy.headers[0] == ("trace", b"t1")
    assert origin(copy) == {"kdelay.dlq.partition": b"0", "kdelay.dlq.offset": b"0",
                            "kdelay.dlq.delivery_count": b"1",
                            "kdelay.dlq.reason": b"rejected"}


def test_max_delivery_count_from_a_topic(tmp_path, clock, dead) -> None:
    with Topic.open(str(tmp_path), "jobs", partitions=3, clock=clock) as jobs:
        p, _ = jobs.send(Record(b"poison", key=b"user-9", headers=[("h", None)],
                                timestamp=T0 - 100))
        jobs.send(Record(b"fine", key=b"user-9"))
        with QueueConsumer(jobs, "workers", max_delivery_count=2, dead_letter=dead) as q:
            for _ in range(2):
                poison, fine = q.poll()
                q.release(poison)
                q.release(fine)
            assert q.poll() == []  # both would be a 3rd delivery: dead-lettered instead
    copies = dead_letters(dead)
    assert [(c.value, c.key) for c in copies] == [(b"poison", b"user-9"), (b"fine", b"user-9")]
    assert copies[0].timestamp == T0 - 100 and copies[0].headers[0] == ("h", None)
    assert origin(copies[0]) == {"kdelay.dlq.partition": b"%d" % p, "kdelay.dlq.offset": b"0",
                                 "kdelay.dlq.delivery_count": b"2",
                                 "kdelay.dlq.reason": b"max_delivery_count",
                                 "kdelay.dlq.topic": b"jobs"}
    assert origin(copies[1])["kdelay.dlq.offset"] == b"1"


def test_rejected_from_a_topic_names_it(tmp_path, clock, dead) -> None:
    with Topic.open(str(tmp_path), "jobs", partitions=2, clock=clock) as jobs:
        p, _ = jobs.send(Record(b"x", key=b"k"))
        with QueueConsumer(jobs, "w", dead_letter=dead) as q:
            q.reject(q.poll())
    (copy,) = dead_letters(dead)
    assert origin(copy)["kdelay.dlq.topic"] == b"jobs"
    assert origin(copy)["kdelay.dlq.partition"] == b"%d" % p


def test_dead_lettered_again_carries_only_its_latest_origin(tmp_path, clock, dead) -> None:
    with Topic.open(str(tmp_path), "jobs", partitions=1, clock=clock) as jobs:
        jobs.send(Record(b"x"))
        with QueueConsumer(jobs, "w", dead_letter=dead) as q:
            q.reject(q.poll())
        with Topic.open(str(tmp_path / "dl2"), "again", partitions=1, clock=clock) as again:
            with QueueConsumer(dead, "w", dead_letter=again) as q:
                q.reject(q.poll())
            (copy,) = dead_letters(again)
    assert [k for k, _ in copy.headers].count("kdelay.dlq.topic") == 1
    assert origin(copy)["kdelay.dlq.topic"] == b"jobs.dlq"


headers = st.lists(st.tuples(st.sampled_from(["a", "kdelay.dlq.offset", "kdelay.attempt"]),
                             st.none() | st.binary(max_size=4)), max_size=4)


@given(headers, st.none() | st.integers(0, 99), st.integers(0, 2 ** 63 - 1),
       st.integers(1, 10 ** 9), st.sampled_from(["rejected", "max_delivery_count"]),
       st.none() | st.just("t.1"))
def test_the_copy(hs, partition, offset, count, reason, topic) -> None:
    rec = FetchedRecord(offset, 5, 7, b"k", b"v", hs, partition)
    copy = dead_letter_copy(rec, delivery_count=count, reason=reason, topic=topic)
    assert (copy.value, copy.key, copy.timestamp, copy.deliver_after) == (b"v", b"k", 7, None)
    kept = [h for h in hs if not h[0].startswith("kdelay.dlq.")]
    assert copy.headers[:len(kept)] == kept
    want = {"kdelay.dlq.partition": str(partition or 0).encode(),
            "kdelay.dlq.offset": str(offset).encode(),
            "kdelay.dlq.delivery_count": str(count).encode(),
            "kdelay.dlq.reason": reason.encode()}
    if topic is not None:
        want["kdelay.dlq.topic"] = topic.encode()
    assert dict(copy.headers[len(kept):]) == want and len(copy.headers) == len(kept) + len(want)
