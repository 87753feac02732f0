"""Fetch on the wire, requests built and answers read with kio (Kafka's own schemas): the
limits a client sets (partition and response max_bytes, at least one batch), the error
codes (OFFSET_OUT_OF_RANGE with the bounds, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION),
sessionless answers, and batches in ascending offsets reaching the fetch offset."""

from __future__ import annotations

import datetime
import io
import os
import socket
import struct
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32, i32Timedelta, i64
from view_support import decode_served

from kdelay import Broker, Record, Topic
from kdelay.broker.responses import build, entry_type

BATCHES, PER_BATCH = 6, 20


TOPIC_IDS: dict = {}


def topic_id(name: str):
    return TOPIC_IDS[name]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = os.fspath(tmp_path_factory.mktemp("root"))
    with Topic.open(root, "w", partitions=2) as t:
        for p in range(2):
            for b in range(BATCHES):
                t.partition(p).append([Record(b"%d-%d-%d" % (p, b, i) + b"x" * 40)
                                       for i in range(PER_BATCH)])
    with Broker(root, listen="127.0.0.1:0") as b:
        TOPIC_IDS["w"] = b._server.state.topics.topic_id("w")  # what Metadata hands out
        host, port = b.bootstrap_servers.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as s:
            yield s


def fetch(sock, version: int, topics: list, *, max_bytes: int = 1 << 20,
          min_bytes: int = 1, max_wait_ms: int = 0):
    """Send one Fetch of `version`; `topics` is [(name or id, [(partition, offset,
    partition_max_bytes)])]. Returns the decoded response."""
    req_type = load_request_schema(1, version)
    topic_type = entry_type(req_type, "topics")
    part_type = entry_type(topic_type, "partitions")
    by_id = version >= 13
    wire_topics = tuple(
        build(topic_type, topic=None if by_id else t, topic_id=t if by_id else None,
              partitions=tuple(build(part_type, partition=i32(p), current_leader_epoch=i32(-1),
                                     fetch_offset=i64(o), last_fetched_epoch=i32(-1),
                                     log_start_offset=i64(-1), partition_max_bytes=i32(m))
                               for p, o, m in parts))
        for t, parts in topics)
    replica = entry_type(req_type, "replica_state") if "replica_state" in \
        req_type.__dataclass_fields__ else None
    req = build(req_type, replica_id=BrokerId(-1), cluster_id=None,
                replica_state=replica(replica_id=BrokerId(-1), replica_epoch=i64(-1))
                if replica else None,
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
                min_bytes=i32(min_bytes), max_bytes=i32(max_bytes), isolation_level=i8(0),
                session_id=i32(0), session_epoch=i32(-1), topics=wire_topics,
                forgotten_topics_data=(), rack_id="")
    header = req_type.__header_schema__(request_api_key=req_type.__api_key__,
                                        request_api_version=req_type.__version__,
                                        correlation_id=i32(7), client_id="wire-test")
    body = io.BytesIO()
    entity_writer(req_type.__header_schema__)(body, header)
    entity_writer(req_type)(body, req)
    sock.sendall(struct.pack(">i", len(body.getvalue())) + body.getvalue())
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    frame = _exactly(sock, size)
    resp_type = load_response_schema(1, version)
    _, used = entity_reader(resp_type.__header_schema__)(frame, 0)
    return entity_reader(resp_type)(frame, used)[0]


def _exactly(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the broker closed the connection"
        out += chunk
    return out


def _records(part) -> list:
    return decode_served(part.records or b"")


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_limits_order_and_bounds(broker, version) -> None:
    name = topic_id("w") if version >= 13 else "w"
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
    name = topic_id("w") if version >= 13 else "w"
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
    r = fetch(broker, 16, [(topic_id("w"), [(0, BATCHES * PER_BATCH, 1 << 20)])],
              min_bytes=1, max_wait_ms=200)
    part = r.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none and _records(part) == []
