"""Real clients producing through the broker as their users would: delivery reports and
offsets, keys, headers (the kdelay ones included), null values, timestamps, compression,
idempotence; what each stored is read back with kdelay's own reader and compared.

kafka-python (idempotent by default: InitProducerId), aiokafka (ApiVersions v0), and
confluent-kafka (librdkafka sends v2 batches only to a broker that also answers Fetch;
skipped until the broker does), kcat and KafkaJS where installed (.ci/run installs them;
with CI=true a missing one fails instead of skipping)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess

import pytest
from produce_support import TIMEOUT_S, answers

from kdelay import Broker

IN_CI = os.environ.get("CI") == "true"
JS_DIR = os.path.join(os.path.dirname(__file__), "js")


def missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is not installed (.ci/run installs it)")
    pytest.skip(f"{what} is not installed here (.ci/run installs it)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("produce-clients")
    with Broker(root, listen="127.0.0.1:0",
                config={"delayed.delivery.max.spread.ms": "1000"}) as b:
        yield b


def stored(broker: Broker, topic: str, partition: int = 0) -> list:
    log = broker._server.state.topics.get(topic).partition(partition)
    return log.read(0, max_records=10_000)


def check_stored(broker: Broker, topic: str, sent: list[dict], offsets: list[int]) -> None:
    """Each sent record (key, value, headers, timestamp, asked delay) is stored at the
    offset its client was told, as sent, due no earlier than asked and at most the spread
    (1 s) later."""
    by_offset = {r.offset: r for r in stored(broker, topic)}
    assert sorted(by_offset) == sorted(offsets)
    for want, offset in zip(sent, offsets, strict=True):
        got = by_offset[offset]
        assert (got.key, got.value) == (want["key"], want["value"])
        assert got.headers == want["headers"]
        if "timestamp" in want:
            assert got.timestamp == want["timestamp"]
        delay = dict(want["headers"]).get("kdelay.delay_ms")
        if delay is not None:
            # the append's clock is within the test's run: due at least delay after the
            # record was sent, at most the spread after what it asked
            assert got.deliver_after >= want["sent_at"] + int(delay)
            assert got.deliver_after <= want["acked_at"] + int(delay) + 1000


def records(tag: str, n: int = 6) -> list[dict]:
    out = []
    for i in range(n):
        headers = [("i", str(i).encode())]
        if i % 2:
            headers.append(("kdelay.delay_ms", str(1000 * i).encode()))
        out.append({"key": f"k{i}".encode() if i % 3 else None,
                    "value": None if i == 4 else f"{tag}-{i}".encode(),
                    "headers": headers, "timestamp": 1_700_000_000_000 + i})
    return out


def now_ms(broker: Broker) -> int:
    import time
    return time.time_ns() // 1_000_000


def test_kafka_python_produces(broker):
    import kafka
    sent = records("kp")
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                                   compression_type="gzip", linger_ms=5)
    try:
        started = now_ms(broker)
        futures = [producer.send("kp", key=r["key"], value=r["value"], headers=r["headers"],
                                 timestamp_ms=r["timestamp"], partition=0) for r in sent]
        producer.flush(TIMEOUT_S)
        offsets = [f.get(TIMEOUT_S).offset for f in futures]
        acked = now_ms(broker)
    finally:
        producer.close(TIMEOUT_S)
    for r in sent:
        r["sent_at"], r["acked_at"] = started, acked
    check_stored(broker, "kp", sent, offsets)


def test_aiokafka_produces(broker):
    import aiokafka
    sent = records("ai")

    async def run() -> list[int]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                                             compression_type="lz4", linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send("ai", key=r["key"], value=r["value"],
                                           headers=r["headers"], partition=0,
                                           timestamp_ms=r["timestamp"]) for r in sent]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    started = now_ms(broker)
    offsets = asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))
    acked = now_ms(broker)
    for r in sent:
        r["sent_at"], r["acked_at"] = started, acked
    check_stored(broker, "ai", sent, offsets)


@pytest.mark.parametrize("idempotent", [False, True])
def test_confluent_kafka_produces(broker, idempotent):
    if not answers(1):
        pytest.skip("librdkafka sends v2 record batches only to a broker that answers Fetch "
                    "v4+, which this checkout's broker does not yet")
    import confluent_kafka
    topic = f"ck{int(idempotent)}"
    sent = records(topic)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
        "enable.idempotence": idempotent, "compression.type": "zstd" if idempotent
        else "snappy"})
    reports: list = []
    started = now_ms(broker)
    for r in sent:
        producer.produce(topic, key=r["key"], value=r["value"], headers=r["headers"],
                         timestamp=r["timestamp"], partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(TIMEOUT_S) == 0
    acked = now_ms(broker)
    assert [err for err, _ in reports] == [None] * len(sent)
    for r in sent:
        r["sent_at"], r["acked_at"] = started, acked
    check_stored(broker, topic, sent, [m.offset() for _, m in reports])


def test_kcat_produces(broker, tmp_path):
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        missing("kcat")
    if not answers(1):
        pytest.skip("kcat (librdkafka) sends v2 record batches only to a broker that "
                    "answers Fetch")
    lines = "k1:one\nk2:two\n"
    started = now_ms(broker)
    subprocess.run([kcat, "-P", "-b", broker.bootstrap_servers, "-t", "kcat", "-p", "0",
                    "-K:", "-H", "kdelay.delay_ms=2000"], input=lines.encode(),
                   check=True, timeout=TIMEOUT_S)
    acked = now_ms(broker)
    sent = [{"key": k.encode(), "value": v.encode(), "headers": [("kdelay.delay_ms", b"2000")],
             "sent_at": started, "acked_at": acked}
            for k, v in (line.split(":") for line in lines.split())]
    check_stored(broker, "kcat", sent, [0, 1])


def test_kafkajs_produces(broker):
    node = shutil.which("node")
    if node is None or not os.path.isdir(os.path.join(JS_DIR, "node_modules", "kafkajs")):
        missing("node and kafkajs (npm install in tests/broker/js)")
    started = now_ms(broker)
    out = subprocess.run([node, os.path.join(JS_DIR, "produce.js"), broker.bootstrap_servers,
                          "kjs"], check=True, capture_output=True, timeout=TIMEOUT_S)
    acked = now_ms(broker)
    offsets = json.loads(out.stdout)
    sent = [{"key": b"k%d" % i, "value": b"kafkajs-%d" % i,
             "headers": [("kdelay.delay_ms", b"1500")], "sent_at": started,
             "acked_at": acked} for i in range(3)]
    check_stored(broker, "kjs", sent, offsets)
