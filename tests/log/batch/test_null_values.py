"""Null values (Kafka tombstones), null keys and null header values through the Log: accepted
by append, stored as length -1, read back as None by fetch, read and after a reopen."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from kdelay import InvalidRecordError, Log, Record
from kdelay.log.batch import codec

T0 = 1_700_000_000_000


def to_kafka_v2(batch: bytes) -> bytes:
    """Our batch as a plain Kafka v2 one (docs/api.md's layout note): no deliverAfter, magic 2."""
    h = codec.parse_header(batch)
    body = batch[21:43] + batch[51:h.size]
    return struct.pack(">qiibI", h.base_offset, h.batch_length - 8, h.leader_epoch, 2,
                       crc32c.crc32c(body)) + body


class Clock:
    def __init__(self, t: int = T0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def _log_batches(path) -> list[bytes]:
    """Every batch of the log's first segment, straight from the .log file."""
    data = (path / f"{0:020d}.log").read_bytes()
    out, pos = [], 0
    while pos < len(data):
        h = codec.parse_header(data, pos)
        out.append(data[pos:pos + h.size])
        pos += h.size
    return out


def test_tombstones_round_trip(tmp_path):
    clock = Clock()
    recs = [Record(None, key=b"k1"), Record(b"v", key=None), Record(None),
            Record(None, key=b"k4", headers=[("kdelay.attempt", b"2"), ("gone", None)],
                   timestamp=T0 - 5)]
    with Log.open(tmp_path / "p", clock=clock) as log:
        res = log.append(recs, deliver_after=T0 + 10)
        log.append([Record(None, key=b"solo")])
        clock.t = T0 + 10
        got = log.fetch(max_records=10).records
        assert [(r.key, r.value, list(r.headers)) for r in got] == [
            (b"solo", None, []),
            (b"k1", None, []), (None, b"v", []), (None, None, []),
            (b"k4", None, [("kdelay.attempt", b"2"), ("gone", None)])]
        assert [r.value for r in log.read(res.base_offset)] == [None, b"v", None, None, None]
    # a value of length -1 in the records section, as Kafka writes it
    batch = _log_batches(tmp_path / "p")[0]
    kb = DefaultRecordBatch(to_kafka_v2(batch))
    assert kb.validate_crc()
    assert [(r.key, r.value) for r in kb] == [(b"k1", None), (None, b"v"), (None, None),
                                              (b"k4", None)]
    with Log.open(tmp_path / "p", clock=clock) as log:  # reopen (clean) and read again
        assert [r.value for r in log.read(0)] == [None, b"v", None, None, None]


def test_all_null_batches_of_every_size(tmp_path):
    clock = Clock()
    with Log.open(tmp_path / "p", clock=clock) as log:
        sizes = [1, 2, 5, 10, 30, 100, 300]
        for n in sizes:
            log.append([Record(None, key=b"%d" % i, timestamp=T0 - i) for i in range(n)])
        got = log.read(0, max_records=10_000)
        assert len(got) == sum(sizes)
        assert all(r.value is None for r in got)


@pytest.mark.parametrize("bad", [bytearray(b"x"), "text", 5, memoryview(b"x")])
def test_other_values_still_refused(tmp_path, bad):
    with Log.open(tmp_path / "p", clock=Clock()) as log:
        with pytest.raises(InvalidRecordError):
            log.append([Record(b"ok"), Record(bad)])
        assert log.log_end_offset == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=8)),
                          st.lists(st.tuples(st.sampled_from(["a", "kdelay.attempt"]),
                                             st.one_of(st.none(), st.binary(max_size=3))),
                                   max_size=2)),
                min_size=1, max_size=40))
def test_any_mix_reads_back(tmp_path_factory, recs):
    path = tmp_path_factory.mktemp("mix")
    clock = Clock()
    with Log.open(path / "p", clock=clock) as log:
        log.append([Record(v, key=k, headers=h) for v, k, h in recs])
        got = log.read(0, max_records=100)
    assert [(r.value, r.key, list(r.headers)) for r in got] == [
        (v, k, list(h)) for v, k, h in recs]


def test_spark_columnar_decoder_reads_nulls():
    """The Spark reader's own vectorised decoder (no Spark session needed) gives null for a
    value or key of length -1, as the codec does."""
    columnar = pytest.importorskip("kdelay.spark.columnar")
    keys = [b"a", None, b"ccc"] * 10
    values = [None, b"x", None] * 10
    blob = codec.encode_batch(base_offset=7, base_timestamp=T0, deliver_after=T0, keys=keys,
                              values=values, timestamp_deltas=list(range(30)))
    buf = bytearray(len(blob))
    buf[:len(blob)] = blob
    rows = []
    for rb in columnar.records_to_arrow(columnar.Chunk.parse(buf, [0]), segment=0):
        rows.extend(rb.to_pylist())
    assert [(r["key"], r["value"]) for r in rows] == list(zip(keys, values, strict=True))
