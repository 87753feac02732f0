"""Fetch requests on a raw socket, built and read with kio (Kafka's own schemas)."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import uuid

from kio.index import load_request_schema, load_response_schema
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kdelay.broker.responses import build, entry_type


class Conn:
    """A connection to the broker and the id it gives one topic (Metadata's)."""

    def __init__(self, sock: socket.socket, w_id: uuid.UUID):
        self.sock, self.w_id = sock, w_id


def fetch(conn: Conn, version: int, topics: list, *, max_bytes: int = 1 << 20,
          min_bytes: int = 1, max_wait_ms: int = 0):
    """Send one Fetch of `version`; `topics` is [(name or id, [(partition, offset,
    partition_max_bytes)])]. Returns the decoded response."""
    conn.sock.sendall(fetch_frame(version, topics, max_bytes=max_bytes, min_bytes=min_bytes,
                                  max_wait_ms=max_wait_ms))
    size = struct.unpack(">i", _exactly(conn.sock, 4))[0]
    return read_fetch_response(version, _exactly(conn.sock, size))


def fetch_frame(version: int, topics: list, *, max_bytes: int = 1 << 20,
                min_bytes: int = 1, max_wait_ms: int = 0) -> bytes:
    """A Fetch request frame, size prefix included (`fetch` says what the arguments are)."""
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
    return struct.pack(">i", len(body.getvalue())) + body.getvalue()


def read_fetch_response(version: int, frame: bytes):
    """The decoded Fetch response of `version` in `frame` (without its size prefix)."""
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


def connect(bootstrap: str, topic_id: uuid.UUID) -> Conn:
    host, port = bootstrap.rsplit(":", 1)
    return Conn(socket.create_connection((host, int(port)), timeout=60), topic_id)
