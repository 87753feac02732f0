"""A fetch serves stored batches straight from the segments' memory mappings
(record_parts.py, served_header.pyx, mapped_file.pyx's views):
- the served bytes are those of the copying path they replaced (batch_rewrite.put_v2 and
  v2_batches, kept as the oracle), whatever the batch, base offset and MORE_RUNS bit;
- a view keeps its mapping: closed while a view is out, the memory stays readable until
  the view goes, then it is unmapped;
- retention deleting a segment (closing its mapping) while a response made of views of it
  is still unsent leaves that response's bytes intact and CRC-sound; the mapping of the
  deleted file goes with the response."""

from __future__ import annotations

import gc
import os
import random
import time

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_security import certificate  # noqa: F401 (the fixture: a self-signed certificate)
from view_support import T0, FakeClock, decode_served

from kdelay import Log, LogConfig, Record
from kdelay.broker.batch_rewrite import put_v2, v2_batches
from kdelay.broker.delivery_view import DeliveryView
from kdelay.broker.record_parts import GATHER_BELOW, RecordParts
from kdelay.broker.served_header import SERVED_HEAD, STORED_REST, served_header
from kdelay.log.batch import codec
from kdelay.log.segments.mapped_file import MappedFile


def _stored(rng: random.Random, n: int, value_size: int, more_runs: bool) -> bytes:
    """A stored (magic-3) batch of `n` records, MORE_RUNS set or not, its CRC sound."""
    batch = bytearray(codec.encode_batch(
        base_offset=rng.randrange(1 << 40), base_timestamp=rng.randrange(1 << 41),
        deliver_after=rng.randrange(1 << 41),
        keys=[rng.randbytes(rng.randrange(20)) if rng.random() < 0.8 else None
              for _ in range(n)],
        values=[rng.randbytes(rng.randrange(value_size + 1)) for _ in range(n)],
        headers=[[("h", rng.randbytes(3))] if rng.random() < 0.3 else [] for _ in range(n)],
        leader_epoch=rng.randrange(1 << 31)))
    if more_runs:
        batch[codec.CRC_START] |= codec.MORE_RUNS >> 8
        crc = crc32c.crc32c(memoryview(batch)[codec.CRC_START:])
        batch[codec.CRC_OFFSET:codec.CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(batch)


def _old_path(stored: bytes, base: int) -> bytes:
    out = bytearray(len(stored) - 8)
    put_v2(out, 0, stored, base)
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), value_size=st.sampled_from([0, 8, 300]),
       more_runs=st.booleans(), base=st.integers(0, 2**63 - 1))
def test_served_header_gives_the_copying_paths_bytes(seed, n, value_size, more_runs,
                                                     base) -> None:
    stored = _stored(random.Random(seed), n, value_size, more_runs)
    want = _old_path(stored, base)
    for given_as in (stored, memoryview(stored), bytearray(stored)):
        head = served_header(given_as, base)
        assert len(head) == SERVED_HEAD
        assert head + stored[STORED_REST:] == want
    served = decode_served(want)  # kafka-python checks the CRC and reads every record
    assert len(served) == n and served[0][0] == base


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), shapes=st.lists(
    st.tuples(st.integers(1, 40), st.sampled_from([4, 50, 400]), st.booleans(),
              st.booleans()), min_size=0, max_size=8))
def test_record_parts_join_to_v2_batches(seed, shapes) -> None:
    """Batches served at new offsets, or already re-encoded ones, small (gathered into one
    buffer) and large (kept as views) mixed: joined, v2_batches' bytes, and len() theirs."""
    rng = random.Random(seed)
    parts, oracle = RecordParts(), []
    for n, size, more_runs, reencoded in shapes:
        stored = _stored(rng, n, size, more_runs)
        base = rng.randrange(1 << 50)
        if reencoded:
            batch = _old_path(stored, base)
            parts.add_batch(batch)
            oracle.append((batch, None))
        else:
            parts.add_stored(memoryview(stored), base)
            oracle.append((stored, base))
    want = bytes(v2_batches(oracle))
    assert bytes(parts) == want and len(parts) == len(want)
    assert all(len(p) >= GATHER_BELOW or isinstance(p, bytearray) for p in parts.parts)


def test_a_short_buffer_is_refused() -> None:
    with pytest.raises(ValueError):
        served_header(b"\x00" * (codec.HEADER_SIZE - 1), 0)


def _maps_naming(path: str) -> bool:
    with open("/proc/self/maps") as f:
        return any(path in line for line in f)


def test_a_view_keeps_its_mapping_until_released(tmp_path) -> None:
    path = os.fspath(tmp_path / "f")
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * 64)
    fd = os.open(path, os.O_RDONLY)
    try:
        m = MappedFile(fd, 256 * 64)
    finally:
        os.close(fd)
    view = m.view(256, 512)
    part = view[10:20]
    del view  # a slice alone keeps the mapping too
    m.close()
    assert m.closed and _maps_naming(path)
    with pytest.raises(ValueError):
        m.read(0, 1)
    with pytest.raises(ValueError):
        m.view(0, 1)
    os.unlink(path)
    assert bytes(part) == bytes(range(10, 20))  # read after close and unlink
    part.release()
    gc.collect()
    assert not _maps_naming(path)  # unmapped with the last view


CONFIG = LogConfig(retention_ms=1000, compaction_min_ratio=0)


def test_retention_deleting_a_segment_under_an_unsent_response(tmp_path) -> None:
    """The response is built (views of segments 0 and 1), then retention deletes those
    segments and the log closes, before anything is "sent": its bytes are still the ones
    read, every batch passes its CRC, and the mappings go when the response does."""
    path = os.fspath(tmp_path / "t-0")
    clock = FakeClock(T0)
    log = Log.open(path, config=CONFIG, clock=clock)
    values = {}
    for seg in range(3):
        for i in range(2):
            batch = [Record(b"%d-%d-%d" % (seg, i, j) + b"v" * 5000) for j in range(4)]
            r = log.append(batch)
            for j in range(4):
                values[r.base_offset + j] = batch[j].value
        log.roll()
    view = DeliveryView.open(log)
    try:
        view.extend()
        response = view.read(0, 1 << 20)
        held = [p for p in response.parts if isinstance(p, memoryview)]
        assert len(held) == 6  # each batch's body a view of its segment's mapping
        sent = bytes(response)  # what the socket would have sent at once
        sealed = [os.path.join(path, f) for f in sorted(os.listdir(path))
                  if f.endswith(".log")][:3]
        view.sync()
        clock.advance(5000)
        assert log.enforce_retention() == 3
        assert not any(os.path.exists(p) for p in sealed)
        assert all(_maps_naming(p) for p in sealed)  # kept by the unsent response
    finally:
        view.close()
        log.close()
    assert bytes(response) == sent
    got = decode_served(bytes(response))
    assert [(o, v) for _, o, _, v, *_ in got] == sorted(values.items())
    del response, held
    gc.collect()
    assert not any(_maps_naming(p) for p in sealed)


def test_a_slow_reader_gets_sound_batches_while_retention_deletes_their_segments(
        tmp_path) -> None:
    """`kdelay serve` (uvloop, which keeps the response's views until the socket takes
    them): a client with a tiny receive buffer asks for ~12 MB over 12 sealed segments and
    reads only the size prefix (the answer is built and handed to the transport); the
    topic's retention.ms is then set to 1, which reopens its partitions (closing every
    mapping) and lets the broker's retention pass delete the segments; only then does the
    client read the rest. Every batch arrives whole, CRC-sound, with its records."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from produce_support import TIMEOUT_S, broker_process
    from wire_support import _exactly, fetch_frame, read_fetch_response

    from kdelay import Topic

    root = os.fspath(tmp_path)
    values = []
    with Topic.open(root, "r", partitions=1, config=LogConfig(segment_bytes=1 << 20)) as t:
        log = t.partition(0)
        for b in range(12 * 16):  # 16 batches of ~64 KiB a segment
            batch = [Record(b"%05d-%02d" % (b, j) + b"r" * 4000) for j in range(16)]
            log.append(batch)
            values += [r.value for r in batch]
        first_segment = os.path.join(log.path, "0" * 20 + ".log")
    with broker_process(root, "log.retention.check.interval.ms=20") as (_, bootstrap):
        host, port = bootstrap.rsplit(":", 1)
        import socket
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT_S)
        sock.connect((host, int(port)))
        with sock:
            sock.sendall(fetch_frame(12, [("r", [(0, 0, 16 << 20)])], max_bytes=16 << 20))
            size = int.from_bytes(_exactly(sock, 4), "big")  # answered: the rest is queued
            assert size > 2 * (4 << 20)  # twice the most the kernel buffers (tcp_wmem: 4 MiB)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            change = ConfigResource(ResourceType.TOPIC, "r", incremental_configs=[
                ConfigEntry("retention.ms", "1",
                            incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([change]).values():
                f.result(TIMEOUT_S)
            deadline = time.monotonic() + TIMEOUT_S
            while os.path.exists(first_segment):  # the retention pass has run
                assert time.monotonic() < deadline, "retention never deleted a segment"
                time.sleep(0.02)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            frame = bytearray(size)
            got_bytes = 0
            while got_bytes < size:
                n = sock.recv_into(memoryview(frame)[got_bytes:])
                assert n, "the broker closed the connection"
                got_bytes += n
            r = read_fetch_response(12, bytes(frame))
    part = r.responses[0].partitions[0]
    got = decode_served(part.records)  # every batch's CRC checked
    assert [v for _, _, _, v, *_ in got] == values


def test_a_consumer_over_tls_gets_batches_served_from_the_mapping(
        tmp_path, certificate) -> None:  # noqa: F811 (pytest's fixture, imported above)
    """`kdelay serve --tls-cert` (uvloop's TLS transport holds the views until it has
    encrypted them): a confluent Consumer over SSL reads batches of ~64 KB, served as
    views of the mapping, whole and in order."""
    import subprocess
    import sys

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from produce_support import TIMEOUT_S

    from kdelay import Topic
    from kdelay.testing.processes import child_env

    cert, key = certificate
    root = os.fspath(tmp_path)
    values = []
    with Topic.open(root, "s", partitions=1) as t:
        for b in range(6):
            batch = [Record(b"%d-%02d" % (b, j) + b"s" * 4000) for j in range(16)]
            t.partition(0).append(batch)
            values += [r.value for r in batch]
    proc = subprocess.Popen([sys.executable, "-m", "kdelay", "serve", root, "--listen",
                             "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
                             "--log-level", "WARNING"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=child_env())
    try:
        bootstrap = proc.stdout.readline().split(" on ", 1)[1].split()[0]
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tls",
                      "security.protocol": "SSL", "ssl.ca.location": cert,
                      "enable.auto.commit": False})
        try:
            c.assign([TopicPartition("s", 0, OFFSET_BEGINNING)])
            got: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < len(values):
                assert time.monotonic() < deadline, f"only {len(got)} records"
                got += [m.value() for m in c.consume(100, 1.0) if m.error() is None]
        finally:
            c.close()
    finally:
        proc.kill()
        proc.wait()
    assert got == values
