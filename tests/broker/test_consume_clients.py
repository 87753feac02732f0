"""Real consumers reading a delayed topic through the broker with assign() and seek:
kafka-python (Fetch v12), aiokafka (Fetch v11), confluent-kafka (Fetch v16, topics by
id). Each sees every record exactly once at its delivery offset, in due order, none before
it was due, keys, null values, headers and timestamps as written; a fetch long-polls until
the next record comes due or an append of a due record wakes it; an offset outside the
view is reset as auto.offset.reset says; ListOffsets answers by delivery offset; a plain
topic is served by log offset."""

from __future__ import annotations

import os
import time

import pytest
from consume_support import (
    TIMEOUT_S,
    check_delivered,
    due_records,
    produce_answered,
    read_aiokafka,
    read_confluent,
    read_kafka_python,
    wall_ms,
)

from kdelay import Broker, LogConfig, Record, Topic
from kdelay.broker.topics import TopicRegistry

CLIENTS = {"kafka-python": read_kafka_python, "aiokafka": read_aiokafka,
           "confluent-kafka": read_confluent}
N = 24


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = os.fspath(tmp_path_factory.mktemp("root"))
    for name in [*CLIENTS, "wake", "reset", "times", "plain"]:
        Topic.open(root, name, partitions=1).close()
    with Broker(root, listen="127.0.0.1:0") as b:
        yield b


def _topic(broker: Broker, name: str) -> Topic:
    """The served topic, to write to in process (the broker holds its lock)."""
    return broker._server.state.topics.get(name)


@pytest.mark.parametrize("client", list(CLIENTS))
def test_each_client_reads_due_records_in_due_order(broker, client) -> None:
    if client == "confluent-kafka" and not produce_answered():
        pytest.skip("librdkafka fetches v2 batches only from a broker that answers Produce "
                    "v3+; Produce comes with the topics session's work")
    now = wall_ms()
    expected = due_records(_topic(broker, client), 0, N, start_ms=now - 500, spread_ms=2500,
                           tag=client)
    got = CLIENTS[client](broker.bootstrap_servers, client, 0, N)
    check_delivered(got, expected)


def test_a_waiting_fetch_is_woken_by_an_append_of_a_due_record(broker) -> None:
    """The consumer's fetch waits up to 60 s (fetch_max_wait_ms): the record, appended due
    at once while it waits, reaches it well within the read's bound only if the append
    wakes the fetch (a record due in 1 s likewise by the timer at its due time)."""
    topic = _topic(broker, "wake")
    import threading
    t = threading.Timer(1.0, lambda: topic.send([Record(b"now", key=b"k")]))
    t.start()
    try:
        got = read_kafka_python(broker.bootstrap_servers, "wake", 0, 1, fetch_wait_ms=60_000)
    finally:
        t.join()
    assert [(g.offset, g.value) for g in got] == [(0, b"now")]
    due = wall_ms() + 1000
    topic.send([Record(b"later")], deliver_after=due)
    got = read_kafka_python(broker.bootstrap_servers, "wake", 1, 1, fetch_wait_ms=60_000)
    assert [(g.offset, g.value) for g in got] == [(1, b"later")]
    assert got[0].received_ms >= due


def test_an_offset_past_the_high_watermark_is_reset(broker) -> None:
    expected = due_records(_topic(broker, "reset"), 0, 6, start_ms=wall_ms() - 1000,
                           spread_ms=0, tag="reset")
    got = read_kafka_python(broker.bootstrap_servers, "reset", 1000, len(expected),
                            reset="earliest")
    check_delivered(got, expected)


def test_list_offsets_by_delivery_offset(broker) -> None:
    from kafka import KafkaConsumer, TopicPartition
    now = wall_ms()
    topic = _topic(broker, "times")
    for i, delay in enumerate([100, 200, 300, 60_000]):
        topic.send([Record(b"%d" % i)], deliver_after=now + delay)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    try:
        tp = TopicPartition("times", 0)
        deadline = time.monotonic() + TIMEOUT_S
        while c.end_offsets([tp])[tp] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for a state, bounded: not a race
        assert c.end_offsets([tp]) == {tp: 3}  # the high watermark: three are due
        assert wall_ms() >= now + 300
        assert c.beginning_offsets([tp]) == {tp: 0}
        found = c.offsets_for_times({tp: now + 150})[tp]
        assert (found.offset, found.timestamp) == (1, now + 200)
        assert c.offsets_for_times({tp: now + 301})[tp] is None  # none numbered from there
    finally:
        c.close()


def _create_plain(broker: Broker, monkeypatch) -> Topic:
    """Topic "plain" created with delayed.delivery.enable=false through the broker's
    registry (the topics session's takes configs; the skeleton's, without topic configs,
    is told to open it so)."""
    topics = broker._server.state.topics
    try:
        return topics.create("plain", 1, {"delayed.delivery.enable": "false"})
    except TypeError:
        monkeypatch.setattr(TopicRegistry, "config_for", lambda self, name: LogConfig(
            delayed_delivery_enable=name != "plain"))
        return topics.create("plain", 1)


def test_a_plain_topic_is_served_by_log_offset(tmp_path, monkeypatch) -> None:
    with Broker(os.fspath(tmp_path), listen="127.0.0.1:0") as b:
        t = _create_plain(b, monkeypatch)
        assert not t.partition(0).config.delayed_delivery_enable
        for i in range(5):
            t.send([Record(b"%d-%d" % (i, j), timestamp=1000 * i + j) for j in range(3)])
        got = read_kafka_python(b.bootstrap_servers, "plain", 4, 11)
        assert [(g.offset, g.value) for g in got] == [
            (o, b"%d-%d" % divmod(o, 3)) for o in range(4, 15)]
        from kafka import KafkaConsumer, TopicPartition
        c = KafkaConsumer(bootstrap_servers=b.bootstrap_servers)
        try:
            tp = TopicPartition("plain", 0)
            assert c.end_offsets([tp]) == {tp: 15}
            found = c.offsets_for_times({tp: 2001})[tp]
            assert (found.offset, found.timestamp) == (7, 2001)
        finally:
            c.close()
