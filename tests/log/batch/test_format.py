"""The on-disk batch format against an independent oracle: kafka-python's v2 record batches.

The conversion (drop deliverAfter at bytes 43..51, magic 2, batchLength - 8, new CRC) is
done by hand here, so a codec bug cannot hide behind a shared helper.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import hypothesis.strategies as st
import pytest
from conftest import T0
from hypothesis import given, settings
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kdelay import Log, LogConfig, Record


def _split_batches(raw: bytes) -> list[bytes]:
    """The .log as a plain concatenation: baseOffset(8) batchLength(4) then that many bytes."""
    out, pos = [], 0
    while pos < len(raw):
        assert len(raw) - pos >= 12, "trailing bytes that are no batch"
        (length,) = struct.unpack_from(">i", raw, pos + 8)
        assert 12 + length <= len(raw) - pos, "batch runs past the end of the file"
        out.append(raw[pos:pos + 12 + length])
        pos += 12 + length
    assert pos == len(raw)
    return out


def _to_kafka_v2(batch: bytes) -> bytes:
    assert batch[16] == 3
    v2 = bytearray(batch[:43] + batch[51:])
    v2[16] = 2
    struct.pack_into(">i", v2, 8, struct.unpack_from(">i", batch, 8)[0] - 8)
    struct.pack_into(">I", v2, 17, crc32c.crc32c(bytes(v2[21:])))
    return bytes(v2)


def _own_crc_ok(batch: bytes) -> bool:
    return struct.unpack_from(">I", batch, 17)[0] == crc32c.crc32c(batch[21:])


def _kafka_records(v2: bytes) -> list[tuple]:
    b = DefaultRecordBatch(v2)
    assert b.validate_crc()
    assert b.magic == 2
    return [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
            for r in b]


SAMPLES = [
    [Record(b"hello")],
    [Record(b"v%d" % i, key=b"k%d" % i) for i in range(50)],
    [Record(b"", key=b""), Record(b"x" * 300, key=None)],
    [Record(b"a", headers=[("h1", b"v1"), ("h2", None), ("", b"")]), Record(b"b")],
    [Record(b"ts", timestamp=T0 - 5000), Record(b"ts2"), Record(b"ts3", timestamp=T0 + 77)],
    [Record(b"\x00\xff" * 2000, key=b"\x80" * 200,
            headers=[("\u00e9t\u00e9", b"\x00" * 130)])],
]


@pytest.fixture
def written(open_log, clock):
    log = open_log(segment_bytes=1 << 20)
    results = []
    for i, batch in enumerate(SAMPLES):
        results.append(log.append(batch, deliver_after=T0 + 1000 * i if i % 2 else None))
        clock.advance(3)
    log.close()
    raw = Path(log.path, "00000000000000000000.log").read_bytes()
    return raw, results


def test_log_file_is_concatenated_batches(written):
    raw, results = written
    batches = _split_batches(raw)
    assert len(batches) == len(SAMPLES)
    assert sum(map(len, batches)) == len(raw)
    for b, res, sample in zip(batches, results, SAMPLES, strict=True):
        (base, length, _epoch, magic, _crc, _attr, lod, _base_ts, _max_ts, da, pid, pepoch,
         bseq, count) = struct.unpack_from(">qiibIhiqqqqhii", b)
        assert (base, base + lod, da) == (res.base_offset, res.last_offset, res.deliver_after)
        assert magic == 3 and count == len(sample) and length == len(b) - 12
        assert (pid, pepoch, bseq) == (-1, -1, -1)
        assert _own_crc_ok(b)


def test_batches_read_by_kafka_python(written):
    raw, results = written
    for b, res, sample in zip(_split_batches(raw), results, SAMPLES, strict=True):
        got = _kafka_records(_to_kafka_v2(b))
        want = []
        for i, r in enumerate(sample):
            ts = r.timestamp if r.timestamp is not None else res.append_time
            want.append((res.base_offset + i, ts, r.key, r.value, list(r.headers)))
        assert got == want


def test_bytes_equal_kafka_python_builder(written):
    """Beyond readable: the records section is byte for byte what Kafka's writer makes."""
    raw, results = written
    for b, res, sample in zip(_split_batches(raw), results, SAMPLES, strict=True):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1,
                                            base_sequence=-1, batch_size=1 << 22)
        for i, r in enumerate(sample):
            ts = r.timestamp if r.timestamp is not None else res.append_time
            builder.append(i, timestamp=ts, key=r.key, value=r.value, headers=list(r.headers))
        ref = bytes(builder.build())
        ours = _to_kafka_v2(b)
        # records section (after the 61-byte v2 header) is identical
        assert ours[61:] == ref[61:]
        # and so is every header field except baseOffset and partitionLeaderEpoch
        assert ours[16:] == ref[16:], "v2 header fields differ"


def test_deliver_after_field_position(open_log, clock):
    log = open_log()
    log.append([Record(b"x")], deliver_after=0x0102030405060708 + T0)
    log.close()
    raw = Path(log.path, "00000000000000000000.log").read_bytes()
    assert struct.unpack_from(">q", raw, 43)[0] == 0x0102030405060708 + T0


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=200),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
             max_size=2),
    st.one_of(st.none(), st.integers(0, 2**40))), min_size=1, max_size=8), min_size=1,
    max_size=5))
def test_random_batches_roundtrip_through_kafka_python(tmp_path_factory, batches):
    path = os.fspath(tmp_path_factory.mktemp("fmt") / "p")
    log = Log.open(path, config=LogConfig(), clock=lambda: T0)
    appended = []
    for spec in batches:
        recs = [Record(v, key=k, headers=h, timestamp=t) for k, v, h, t in spec]
        appended.append((log.append(recs), recs))
    log.close()
    # user timestamps far in the past make segment_ms roll: take every segment, in order
    batches = [b for name in sorted(os.listdir(path)) if name.endswith(".log")
               for b in _split_batches(Path(path, name).read_bytes())]
    for b, (res, recs) in zip(batches, appended, strict=True):
        all_none = all(r.timestamp is None for r in recs)
        want = [(res.base_offset + i, T0 if all_none or r.timestamp is None else r.timestamp,
                 r.key, r.value, list(r.headers)) for i, r in enumerate(recs)]
        assert _kafka_records(_to_kafka_v2(b)) == want
