"""Topic.now() and Topic.metrics(): the log clock of a topic, and its partitions' metrics
added up (counts summed, per consumer and queue group too)."""

from __future__ import annotations

import pytest
from conftest import T0, FakeClock
from hypothesis import given
from hypothesis import strategies as st

from kdelay import Consumer, QueueConsumer, Record, Topic
from kdelay.clients.topic_metrics import summed
from kdelay.errors import LogClosedError


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_now_is_the_log_clock(tmp_path, clock) -> None:
    with Topic.open(str(tmp_path), "t", partitions=3, clock=clock) as topic:
        assert topic.now() == T0 == topic.partition(1).now()
        clock.advance(5)
        assert topic.now() == T0 + 5
        clock.t = T0  # a clock that steps back: the log clock does not
        assert topic.now() == T0 + 5


def test_metrics_add_up_the_partitions(tmp_path, clock) -> None:
    with Topic.open(str(tmp_path), "t", partitions=3, clock=clock) as topic:
        for i in range(12):
            topic.send(Record(b"x", key=b"k%d" % i),
                       delay_ms=0 if i % 3 else 1000 + i)  # 4 pending
        with Consumer(topic, "c", consumer_timeout_ms=0) as c:
            for _, _ in zip(range(5), c, strict=False):
                pass
            c.commit()
        with QueueConsumer(topic, "q") as q:
            q.ack(q.poll(max_records=3))
            q.poll(max_records=2)
            m = topic.metrics()
            parts = m["partitions"]
            assert parts == [topic.partition(i).metrics() for i in range(3)]
        for key in ("records", "pending_records", "due_records", "bytes", "segments",
                    "cancelled_records"):
            assert m[key] == sum(p[key] for p in parts)
        assert (m["records"], m["pending_records"], m["due_records"]) == (12, 4, 8)
        assert m["earliest_pending_deliver_after"] == T0 + 1000
        assert m["now"] == T0 and m["topic"] == "t"
        # a group's lag over the partitions it has a position on
        assert m["groups"]["c"] == {"lag": sum(p["groups"]["c"]["lag"] for p in parts
                                               if "c" in p["groups"])}
        assert {k: m["queues"]["q"][k] for k in ("acked", "acquired", "available")} == \
            {"acked": 3, "acquired": 2, "available": 3}
        assert "log_end_offset" not in m and "cursor" not in m["queues"]["q"]


def test_metrics_of_a_closed_topic(tmp_path, clock) -> None:
    topic = Topic.open(str(tmp_path), "t", partitions=2, clock=clock)
    topic.close()
    with pytest.raises(LogClosedError):
        topic.metrics()


counts = st.dictionaries(st.sampled_from("abc"), st.integers(0, 10) | st.none()
                         | st.dictionaries(st.sampled_from("xy"), st.integers(0, 10)),
                         max_size=3)


@given(st.lists(counts, min_size=1, max_size=4))
def test_summed(dicts) -> None:
    out = summed(dicts)
    for key in {k for d in dicts for k in d}:
        values = [d[key] for d in dicts if key in d]
        if all(type(v) is int for v in values):
            assert out[key] == sum(values)
        elif all(isinstance(v, dict) for v in values):
            assert out[key] == summed(values)
        else:
            assert key not in out
    assert set(out) <= {k for d in dicts for k in d}
