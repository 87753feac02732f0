"""Fetch on the wire, requests built and answers read with kio (Kafka's own schemas): the
limits a client sets (partition and response max_bytes, at least one batch), the error
codes (OFFSET_OUT_OF_RANGE with the bounds, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION),
sessionless answers, and batches in ascending offsets reaching the fetch offset."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from kio.schema.errors import ErrorCode
from view_support import decode_served
from wire_support import Conn, fetch

from kdelay import Broker, Record, Topic

BATCHES, PER_BATCH = 6, 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = os.fspath(tmp_path_factory.mktemp("root"))
    with Topic.open(root, "w", partitions=2) as t:
        for p in range(2):
            for b in range(BATCHES):
                t.partition(p).append([Record(b"%d-%d-%d" % (p, b, i) + b"x" * 40)
                                       for i in range(PER_BATCH)])
    with Broker(root, listen="127.0.0.1:0") as b:
        host, port = b.bootstrap_servers.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as s:
            yield Conn(s, b._server.state.topics.topic_id("w"))


def _records(part) -> list:
    return decode_served(part.records or b"")


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_limits_order_and_bounds(broker, version) -> None:
    name = broker.w_id if version >= 13 else "w"
    # partition 0 from the middle of a batch, with room for less than one batch: one batch
    r = fetch(broker, version, [(name, [(0, 25, 100), (1, 0, 1 << 20)])])
    if version >= 7:
        assert r.session_id == 0 and r.error_code == ErrorCode.none
    p0, p1 = r.responses[0].partitions
    assert (p0.error_code, p0.high_watermark) == (ErrorCode.none, BATCHES * PER_BATCH)
    got = _records(p0)
    assert [o for _, o, *_ in got] == list(range(20, 40))  # the batch holding 25, whole
    assert len(_records(p1)) == BATCHES * PER_BATCH
    offsets = [o for _, o, *_ in _records(p1)]
    assert offsets == sorted(offsets)
    # the response's max_bytes: the first partition still gets a batch, the next none
    r = fetch(broker, version, [(name, [(0, 0, 1 << 20), (1, 0, 1 << 20)])], max_bytes=10)
    p0, p1 = r.responses[0].partitions
    assert len(_records(p0)) == PER_BATCH and _records(p1) == []
    assert p1.high_watermark == BATCHES * PER_BATCH


@pytest.mark.parametrize("version", [4, 16])
def test_errors(broker, version) -> None:
    name = broker.w_id if version >= 13 else "w"
    r = fetch(broker, version, [(name, [(0, BATCHES * PER_BATCH + 1, 1 << 20),
                                        (5, 0, 1 << 20)])])
    out_of_range, missing = r.responses[0].partitions
    assert out_of_range.error_code == ErrorCode.offset_out_of_range
    assert out_of_range.high_watermark == BATCHES * PER_BATCH
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    unknown = uuid.uuid4() if version >= 13 else "nope"
    r = fetch(broker, version, [(unknown, [(0, 0, 1 << 20)])])
    assert r.responses[0].partitions[0].error_code == (
        ErrorCode.unknown_topic_id if version >= 13 else ErrorCode.unknown_topic_or_partition)


def test_a_fetch_at_the_high_watermark_waits_then_answers_empty(broker) -> None:
    r = fetch(broker, 16, [(broker.w_id, [(0, BATCHES * PER_BATCH, 1 << 20)])],
              min_bytes=1, max_wait_ms=200)
    part = r.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none and _records(part) == []
