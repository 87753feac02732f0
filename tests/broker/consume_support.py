"""Helpers of the consuming tests: records written in process with their due times, the
broker in a child process, and each client's consumer reading a partition from an offset
with assign() (no group), noting when each record arrived."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from produce_support import broker_process, stop  # noqa: F401 (for the consume tests)

from kdelay import Record
from kdelay.broker.apis import all_apis

TIMEOUT_S = 60.0  # an upper bound for a read to finish under load, never a measurement


@dataclass(frozen=True)
class Got:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list
    timestamp: int
    received_ms: int  # wall clock when the client handed it over


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def due_records(topic, partition: int, n: int, *, start_ms: int, spread_ms: int,
                tag: str) -> list[tuple[int, int, bytes | None]]:
    """Write `n` single-record batches due over [start_ms, start_ms + spread_ms) in a
    shuffled order (later offsets often due earlier), every third with a null value;
    returns (deliverAfter, index, value) in due order as the view must number them (the
    record's offset breaking ties)."""
    out = []
    log = topic.partition(partition)
    for i in range(n):
        due = start_ms + (i * 7919) % max(1, spread_ms) if spread_ms else start_ms
        value = None if i % 3 == 2 else f"{tag}-{i}".encode()
        r = log.append([Record(value, key=f"k{i}".encode(), timestamp=1_000_000 + i,
                               headers=[("i", str(i).encode())])], deliver_after=due)
        out.append((r.deliver_after, r.base_offset, i, value))
    out.sort()
    return [(da, i, value) for da, _, i, value in out]


def read_kafka_python(bootstrap: str, topic: str, start: int, count: int, *,
                      reset: str = "earliest", fetch_wait_ms: int = 500) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      auto_offset_reset=reset, fetch_max_wait_ms=fetch_wait_ms,
                      request_timeout_ms=fetch_wait_ms + 30_000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, start)
        got: list[Got] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for msgs in c.poll(200).values():
                now = wall_ms()
                got += [Got(m.offset, m.key, m.value, list(m.headers), m.timestamp, now)
                        for m in msgs]
        return got[:count]
    finally:
        c.close()


def read_aiokafka(bootstrap: str, topic: str, start: int, count: int) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Got]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, start)
            got: list[Got] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < count and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=200)).values():
                    now = wall_ms()
                    got += [Got(m.offset, m.key, m.value, list(m.headers or ()), m.timestamp,
                                now) for m in msgs]
            return got[:count]
        finally:
            await c.stop()

    return asyncio.run(run())


def read_confluent(bootstrap: str, topic: str, start: int, count: int) -> list[Got]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-by-assign",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, start)])
        got: list[Got] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(Got(m.offset(), m.key(), m.value(), list(m.headers() or ()),
                           m.timestamp()[1], wall_ms()))
        return got[:count]
    finally:
        c.close()


def check_delivered(got: list[Got], expected: list[tuple[int, int, bytes | None]],
                    first: int = 0) -> None:
    """`got` are the records numbered `first`.. of `expected` (due_records' list): each
    once, in order, at its delivery offset, none before it was due, key, value (null
    included), headers and timestamp as written."""
    assert [g.offset for g in got] == list(range(first, first + len(got)))
    assert len(got) == len(expected) - first, f"{len(got)} of {len(expected) - first}"
    for g, (due, i, value) in zip(got, expected[first:], strict=True):
        assert g.received_ms >= due, f"record {i} came {due - g.received_ms} ms early"
        assert g.key == f"k{i}".encode()
        assert g.value == value
        assert [(k, bytes(v)) for k, v in g.headers] == [("i", str(i).encode())]
        assert g.timestamp == 1_000_000 + i


def produce_answered() -> bool:
    """Does the broker answer Produce? librdkafka fetches v2 batches (Fetch v4+) only from
    a broker that also advertises Produce v3+ (its MsgVer2 feature)."""
    return any(api.key == 0 for api in all_apis())
