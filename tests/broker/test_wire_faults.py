"""Bad input on the wire: oversized, truncated and garbage frames, unknown APIs and versions,
a client stalling mid-frame, more connections than allowed, and a hypothesis fuzz of the
frame decoder against a running broker. Each bad connection is answered with an error or
closed, nothing is written, and every other client is served all along. Shutdown: SIGTERM
answers, flushes and exits 0; kill -9 loses nothing acknowledged."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from produce_support import (
    RawClient,
    broker_process,
    partition_answer,
    produce_request,
    stop,
    stored,
    v2_batch,
)

from kdelay import Broker
from kdelay.broker.responses import make


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("wire-faults")
    with Broker(root, listen="127.0.0.1:0",
                config={"socket.request.max.bytes": "100000", "kdelay.frame.timeout.ms": "300",
                        "max.connections": "60"}) as b:
        b._server.state.topics.create("w", 1)
        yield b


def end_offset(broker: Broker) -> int:
    return broker._server.state.topics.get("w").partition(0).log_end_offset


def served(broker: Broker) -> bool:
    """A fresh client is answered (ApiVersions v3) and can produce."""
    with RawClient(broker.bootstrap_servers) as c:
        versions = c.request(18, 3, make(load_request_schema(18, 3),
                                         client_software_name="t",
                                         client_software_version="1"))
        assert versions.error_code == ErrorCode.none
    return True


def closed_without_answer(c: RawClient) -> bool:
    try:
        c.read_frame()
    except (EOFError, ConnectionError):
        return True
    return False


def test_oversized_truncated_and_garbage_frames_close_only_their_connection(broker):
    before = end_offset(broker)
    with RawClient(broker.bootstrap_servers) as big, \
            RawClient(broker.bootstrap_servers) as garbage, \
            RawClient(broker.bootstrap_servers) as unknown, \
            RawClient(broker.bootstrap_servers) as negative:
        big.send(struct.pack(">i", 100_001) + b"\0" * 64)
        garbage.send(struct.pack(">i", 12) + b"\x00\x00\x00\x09" + b"\xff" * 8)
        unknown.send(struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\0\0")
        negative.send(struct.pack(">i", -5))
        for c in (big, garbage, unknown, negative):
            assert closed_without_answer(c)
    with RawClient(broker.bootstrap_servers) as trunc:  # half a request, then the client goes
        frame = trunc.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"x"])))
        trunc.send(frame[:len(frame) // 2])
    assert served(broker) and end_offset(broker) == before


def test_a_client_stalling_mid_frame_is_closed(broker):
    with RawClient(broker.bootstrap_servers) as stall:
        frame = stall.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"x"])))
        stall.send(frame[:20])
        assert served(broker)  # others meanwhile
        assert closed_without_answer(stall)  # after kdelay.frame.timeout.ms


def test_a_client_stalling_inside_the_size_prefix_is_closed_an_idle_one_is_kept(broker):
    with RawClient(broker.bootstrap_servers) as idle, \
            RawClient(broker.bootstrap_servers) as stall:
        assert served(broker)
        stall.send(struct.pack(">i", 40)[:2])  # half a size prefix, then nothing
        assert closed_without_answer(stall)  # after kdelay.frame.timeout.ms
        # `idle` has sent nothing for longer than the stall timeout: still served
        versions = idle.request(18, 3, make(load_request_schema(18, 3),
                                            client_software_name="t",
                                            client_software_version="1"))
        assert versions.error_code == ErrorCode.none


def test_unknown_versions(broker):
    with RawClient(broker.bootstrap_servers) as c:
        # ApiVersions at a version it lacks: the protocol's error answer (v0), then on
        c.send(c.frame(18, 3, make(load_request_schema(18, 3), client_software_name="t",
                                   client_software_version="1")).replace(
            b"\x00\x12\x00\x03", b"\x00\x12\x00\x63", 1))
        data = c.read_frame()
        assert struct.unpack_from(">h", data, 4)[0] == ErrorCode.unsupported_version.value
    with RawClient(broker.bootstrap_servers) as c:  # a Produce version it lacks: closed
        frame = c.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"x"])))
        c.send(frame[:6] + b"\x00\x0c" + frame[8:])  # version 12
        assert closed_without_answer(c)
    assert served(broker)


def test_connections_past_max_connections_are_closed(broker):
    held = []
    try:
        for _ in range(58):
            host, port = broker.bootstrap_servers.rsplit(":", 1)
            s = socket.create_connection((host, int(port)))
            held.append(s)
        assert served(broker)  # the 59th
        extra = [RawClient(broker.bootstrap_servers) for _ in range(4)]
        closed = 0
        for c in extra:
            c.send(c.frame(18, 0, make(load_request_schema(18, 0))))
            closed += closed_without_answer(c)
            c.close()
        assert closed >= 2  # at most 60 are served at once
    finally:
        for s in held:
            s.close()
    assert served(broker)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(
    st.binary(min_size=0, max_size=200),
    st.tuples(st.integers(0, 60), st.binary(max_size=60)).map(
        lambda t: struct.pack(">i", t[0]) + t[1]),
    st.tuples(st.integers(0, 2**16), st.integers(0, 255)),
))
def test_fuzzed_frames_never_write_or_stop_the_broker(broker, case):
    before = end_offset(broker)
    with RawClient(broker.bootstrap_servers) as c:
        if isinstance(case, tuple):  # a valid Produce with one byte changed
            frame = bytearray(c.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"fz"]))))
            pos, value = case
            frame[4 + pos % (len(frame) - 4)] = value
            c.send(bytes(frame))
            c.sock.shutdown(socket.SHUT_WR)
            try:
                data = c.read_frame()
            except (EOFError, ConnectionError):
                data = None
            wrote = data is not None and answered_ok(data)
        else:
            c.send(case)
            c.sock.shutdown(socket.SHUT_WR)
            wrote = False
            with contextlib.suppress(EOFError, ConnectionError):
                c.read_frame()
    assert served(broker)
    if not wrote:
        assert end_offset(broker) == before


def answered_ok(data: bytes) -> bool:
    """Whether a Produce v9 answer says a partition was written."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader
    resp = load_response_schema(0, 9)
    try:
        _, used = entity_reader(resp.__header_schema__)(data, 0)
        answer = entity_reader(resp)(data, used)[0]
    except Exception:
        return True  # not ours to judge: a changed correlation id or API reads otherwise
    return any(p.error_code == ErrorCode.none for t in answer.responses
               for p in t.partition_responses)


def test_sigterm_answers_flushes_and_exits_0_and_kill_9_loses_nothing_acked(tmp_path):
    root = str(tmp_path)
    acked = []
    with broker_process(root, "flush.messages=1") as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            c.request(3, 12, make(load_request_schema(3, 12), topics=(make(
                load_request_schema(3, 12).__dataclass_fields__["topics"].type.__args__[0]
                .__args__[0], name="s", topic_id=None),), allow_auto_topic_creation=True,
                include_topic_authorized_operations=False))
            for i in range(20):
                answer = partition_answer(c.request(0, 9, produce_request(
                    9, "s", 0, v2_batch([b"s%d" % i]))))
                assert answer.error_code == ErrorCode.none
                acked.append(answer.base_offset)
        stop(proc, signal.SIGKILL)
    assert [r.value for r in stored(root, "s")] == [b"s%d" % i for i in range(20)]
    with broker_process(root) as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            answer = partition_answer(c.request(0, 9, produce_request(
                9, "s", 0, v2_batch([b"after"]))))
            assert answer.base_offset == 20
        assert stop(proc, signal.SIGTERM) == 0
    assert [r.value for r in stored(root, "s")][-1] == b"after"


@pytest.mark.parametrize("chunk", [None, 7, 4093, 8191])
def test_pipelined_frames_of_every_size_are_answered_in_order(broker, chunk):
    """Frames small and larger than the connection's staging buffer (frame_stream.STAGE),
    back to back in one send or dribbled in chunks that cut prefixes and bodies anywhere:
    each is answered, in order, and the records of each Produce are stored once."""
    from kdelay.broker.frame_stream import STAGE
    before = end_offset(broker)
    with RawClient(broker.bootstrap_servers) as c:
        sizes = [1, STAGE // 100, STAGE // 50, 3 * STAGE // 100]  # values of 100 B each
        frames = b""
        kinds = []
        for n in sizes:
            frames += c.frame(18, 0, make(load_request_schema(18, 0)))
            frames += c.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"v" * 100] * n)))
            kinds += [18, 0]
        if chunk is None:
            c.send(frames)
        else:
            for i in range(0, len(frames), chunk):
                c.send(frames[i:i + chunk])
        for correlation, key in enumerate(kinds, 1):
            data = c.read_frame()
            assert struct.unpack_from(">i", data)[0] == correlation
            if key == 0:
                resp_cls = load_response_schema(0, 9)
                _, used = entity_reader(resp_cls.__header_schema__)(data, 0)
                answer = partition_answer(entity_reader(resp_cls)(data, used)[0])
                assert answer.error_code == ErrorCode.none
    assert end_offset(broker) == before + sum(sizes)


@pytest.mark.parametrize("chunk", [None, 4093])
def test_a_large_frame_read_ahead_then_a_small_one_are_answered(broker, chunk):
    """A frame of ~90 KB (read into a buffer of its own, from the moment its size prefix
    is in) and a small frame after it in the same send, whole or dribbled: both are
    answered, in order, and the Produce's records are stored once."""
    before = end_offset(broker)
    n = 800  # values of 100 B
    with RawClient(broker.bootstrap_servers) as c:
        frames = c.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"v" * 100] * n)))
        assert 80_000 < len(frames) < 100_000
        frames += c.frame(18, 0, make(load_request_schema(18, 0)))
        for i in range(0, len(frames), chunk or len(frames)):
            c.send(frames[i:i + (chunk or len(frames))])
        data = c.read_frame()
        resp_cls = load_response_schema(0, 9)
        _, used = entity_reader(resp_cls.__header_schema__)(data, 0)
        assert partition_answer(entity_reader(resp_cls)(data, used)[0]).error_code == \
            ErrorCode.none
        assert struct.unpack_from(">i", c.read_frame())[0] == 2  # the ApiVersions after it
    assert end_offset(broker) == before + n


def test_a_client_stalling_inside_a_large_frame_is_closed(broker):
    """A frame read into a buffer of its own stalls after its first 20 KB: the stall limit
    closes it, nothing is written."""
    before = end_offset(broker)
    with RawClient(broker.bootstrap_servers) as stall:
        frame = stall.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"v" * 100] * 800)))
        stall.send(frame[:20_000])
        assert served(broker)  # others meanwhile
        assert closed_without_answer(stall)  # after kdelay.frame.timeout.ms
    assert end_offset(broker) == before


@pytest.mark.parametrize("records", [1, 900])
def test_a_client_ending_mid_frame_is_closed_at_its_end_not_by_the_stall_limit(
        broker, caplog, records):
    """Half a frame (one that fits the staging buffer, one read into its own), then the
    client shuts its side: the broker closes the connection for the end of the stream,
    not after the stall limit, and writes nothing."""
    before = end_offset(broker)
    with caplog.at_level("WARNING", logger="kdelay.broker"), \
            RawClient(broker.bootstrap_servers) as c:
        frame = c.frame(0, 9, produce_request(9, "w", 0, v2_batch([b"v" * 100] * records)))
        c.send(frame[:len(frame) // 2])
        c.sock.shutdown(socket.SHUT_WR)
        assert closed_without_answer(c)
    reasons = [r.getMessage() for r in caplog.records if "closing connection" in
               r.getMessage()]
    assert reasons and all("closed mid-frame" in m for m in reasons), reasons
    assert end_offset(broker) == before
