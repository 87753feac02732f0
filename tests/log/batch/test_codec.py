"""The batch codec: round trips, the kafka-python oracle for every batch shape, the compiled
loops' own refusals, header layout, and corruption (which must only ever raise
CorruptLogError)."""

from __future__ import annotations

import random
import struct

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import decode_varint, encode_varint

from kdelay.errors import CorruptLogError, InvalidRecordError
from kdelay.log.batch import codec, varint

# ---------------------------------------------------------------------------- oracles


def to_kafka_v2(batch: bytes) -> bytes:
    """The same batch as a plain Kafka v2 RecordBatch: drop deliverAfter, magic 2, new CRC."""
    h = codec.parse_header(batch)
    body = batch[codec.CRC_START:codec.DELIVER_AFTER_OFFSET] + \
        batch[codec.DELIVER_AFTER_OFFSET + 8: h.size]
    head = struct.pack(">qiibI", h.base_offset, h.batch_length - 8, h.leader_epoch, 2,
                       crc32c.crc32c(body))
    return head + body


BASE_TS = 1_700_000_000_000
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------- helpers


class Spec:
    """One batch's inputs, with what decoding it must give back."""

    def __init__(self, keys, values, deltas=None, headers=None, base_offset=0,
                 base_ts=BASE_TS, deliver_after=BASE_TS + 5000):
        self.keys = keys
        self.values = values
        self.deltas = deltas
        self.headers = headers
        self.base_offset = base_offset
        self.base_ts = base_ts
        self.deliver_after = deliver_after

    @property
    def n(self) -> int:
        return len(self.values)

    def encode(self) -> bytes:
        return codec.encode_batch(
            base_offset=self.base_offset, base_timestamp=self.base_ts,
            deliver_after=self.deliver_after, keys=self.keys, values=self.values,
            timestamp_deltas=None if self.deltas is None else np.array(self.deltas, np.int64),
            headers=self.headers)

    def timestamps(self) -> list[int]:
        if self.deltas is None:
            return [self.base_ts] * self.n
        return [self.base_ts + d for d in self.deltas]

    def expected(self) -> codec.RecordColumns:
        headers = [[] for _ in range(self.n)] if self.headers is None else \
            [list(h) for h in self.headers]
        return codec.RecordColumns(self.timestamps(), list(self.keys), list(self.values),
                                   headers)

    def kafka_builder_bytes(self) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=1 << 30)
        hs = self.headers or [[] for _ in range(self.n)]
        for i, (ts, k, v, h) in enumerate(zip(self.timestamps(), self.keys, self.values, hs,
                                              strict=True)):
            b.append(i, timestamp=ts, key=k, value=v, headers=list(h))
        return bytes(b.build())


def _blob(rng: random.Random, length: int) -> bytes:
    return rng.randbytes(length)


@st.composite
def specs(draw, max_records: int = 300) -> Spec:
    """Arbitrary batches. Payloads come from a seeded RNG (drawing 300 binaries one by one
    through hypothesis is slow); the shape knobs come from hypothesis."""
    n = draw(st.integers(1, max_records))
    rng = random.Random(draw(st.integers(0, 2**32)))
    homogeneous = draw(st.booleans())
    null_keys = draw(st.sampled_from([0.0, 0.3, 1.0]))
    null_values = draw(st.sampled_from([0.0, 0.1]))
    max_len = draw(st.sampled_from([0, 1, 20, 70, 300]))
    if homogeneous:
        kl = rng.randint(0, max_len)
        vl = rng.randint(0, max_len)
        keys = [None if null_keys == 1.0 else _blob(rng, kl) for _ in range(n)]
        values = [_blob(rng, vl) for _ in range(n)]
        return Spec(keys, values, base_offset=draw(st.integers(0, 2**62)))
    keys = [None if rng.random() < null_keys else _blob(rng, rng.randint(0, max_len))
            for _ in range(n)]
    values = [None if rng.random() < null_values else _blob(rng, rng.randint(0, max_len))
              for _ in range(n)]
    ts_mode = draw(st.sampled_from(["none", "zero", "small", "wide"]))
    deltas = None
    if ts_mode == "zero":
        deltas = [0] * n
    elif ts_mode == "small":
        deltas = [rng.randint(-70, 70) for _ in range(n)]
    elif ts_mode == "wide":
        deltas = [rng.randint(-(2**40), 2**40) for _ in range(n)]
    headers = None
    if draw(st.booleans()):
        headers = [
            [(rng.choice(["", "a", "trace-id", "é"]),
              None if rng.random() < 0.3 else _blob(rng, rng.randint(0, 30)))
             for _ in range(rng.choice([0, 0, 1, 3]))]
            for _ in range(n)]
    return Spec(keys, values, deltas, headers, base_offset=draw(st.integers(0, 2**62)),
                base_ts=draw(st.integers(0, 2**42)))


def decode(buf) -> codec.RecordColumns:
    h = codec.parse_header(buf)
    codec.check_crc(buf, 0, h)
    return codec.decode_records(buf, h)


def from_kafka_v2(buf: bytes, deliver_after: int) -> bytes:
    """A kafka-python v2 batch turned into ours, independently of encode_batch."""
    body = buf[21:43] + struct.pack(">q", deliver_after) + buf[43:]
    base_offset, batch_length, epoch = struct.unpack_from(">qii", buf)
    return struct.pack(">qiibI", base_offset, batch_length + 8, epoch, 3,
                       crc32c.crc32c(body)) + body


# ---------------------------------------------------------------------------- round trips


@SETTINGS
@given(specs())
def test_round_trip(spec):
    buf = spec.encode()
    assert isinstance(buf, bytes)
    cols = decode(buf)
    assert cols == spec.expected()
    h = codec.parse_header(buf)
    assert h.base_offset == spec.base_offset
    assert h.record_count == spec.n
    assert h.last_offset == spec.base_offset + spec.n - 1
    assert h.deliver_after == spec.deliver_after
    assert h.size == len(buf)
    assert h.max_timestamp == max(spec.timestamps())
    # other buffer types decode the same (the Log may hand in mmap slices or bytearrays)
    assert codec.decode_records(bytearray(buf), h) == cols
    assert codec.decode_records(memoryview(buf), h) == cols
    assert codec.decode_records(buf + b"\xff" * 9, h) == cols


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=12)),
                          st.one_of(st.none(), st.binary(max_size=12)),
                          st.integers(-(2**33), 2**33),
                          st.lists(st.tuples(st.text(max_size=4),
                                             st.one_of(st.none(), st.binary(max_size=4))),
                                   max_size=2)),
                min_size=1, max_size=12))
def test_round_trip_small_drawn(recs):
    """Fully hypothesis-drawn (and so well shrunk) small batches."""
    spec = Spec([r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs],
                [r[3] for r in recs])
    assert decode(spec.encode()) == spec.expected()


# ---------------------------------------------------------------------------- kafka oracle


@SETTINGS
@given(specs())
def test_matches_kafka_python(spec):
    spec.base_offset = 0  # the builder always writes base offset 0
    if spec.deltas is not None:  # the builder's base timestamp is the first record's
        spec.base_ts += spec.deltas[0]
        spec.deltas = [d - spec.deltas[0] for d in spec.deltas]
    ours = to_kafka_v2(spec.encode())
    assert ours == spec.kafka_builder_bytes()
    kb = DefaultRecordBatch(ours)
    assert kb.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    exp = spec.expected()
    assert got == list(zip(range(spec.n), exp.timestamps, exp.keys, exp.values, exp.headers,
                           strict=True))


@SETTINGS
@given(specs(max_records=120))
def test_decodes_kafka_built_batches(spec):
    """Decoding does not just invert our own encoder: it reads what Kafka writes."""
    if spec.deltas is not None:
        spec.base_ts += spec.deltas[0]
        spec.deltas = [d - spec.deltas[0] for d in spec.deltas]
    buf = from_kafka_v2(spec.kafka_builder_bytes(), 123)
    assert decode(buf) == spec.expected()
    assert codec.parse_header(buf).deliver_after == 123


def shape_spec(shape: str, n: int) -> Spec:
    """The batch shapes producers send (issue 12), each on a fast path."""
    rng = random.Random(f"{shape}-{n}")
    keys = [rng.randbytes(16) for _ in range(n)]
    values = [rng.randbytes(100) for _ in range(n)]
    increasing = sorted(rng.randint(0, 40) for _ in range(n))
    increasing = [d - increasing[0] for d in increasing]
    if shape == "homogeneous":
        return Spec(keys, values)
    if shape == "one-timestamp":  # the batch's own stamp, not the append time
        return Spec(keys, values, base_ts=BASE_TS - 12345)
    if shape == "increasing-timestamps":
        return Spec(keys, values, increasing)
    if shape == "wide-increasing-timestamps":  # 2- and 3-byte deltas
        return Spec(keys, values, [i * 997 for i in range(n)])
    if shape == "arbitrary-timestamps":
        return Spec(keys, values, [0] + [rng.randint(-5000, 5000) for _ in range(n - 1)])
    if shape == "retry-header":
        return Spec(keys, values, increasing, [[("kdelay.attempt", b"%d" % 3)]] * n)
    if shape == "some-headers":
        return Spec(keys, values, increasing,
                    [[("trace", rng.randbytes(8))] if i % 10 == 3 else [] for i in range(n)])
    if shape == "header-none-values":
        return Spec(keys, values, None, [[("a", None), ("b", b"")] for _ in range(n)])
    if shape == "null-keys":
        return Spec([None] * n, values, increasing)
    if shape == "null-values":
        return Spec(keys, [None] * n, increasing)
    if shape == "some-nulls":
        return Spec([None if i % 3 == 0 else k for i, k in enumerate(keys)],
                    [None if i % 4 == 1 else v for i, v in enumerate(values)], increasing)
    if shape == "mixed-sizes":
        return Spec([rng.randbytes(rng.randint(0, 70)) for _ in range(n)],
                    [rng.randbytes(rng.choice([0, 5, 100, 300, 9000])) for _ in range(n)],
                    increasing)
    raise AssertionError(shape)


SHAPES = ["homogeneous", "one-timestamp", "increasing-timestamps", "wide-increasing-timestamps",
          "arbitrary-timestamps", "retry-header", "some-headers", "header-none-values",
          "null-keys", "null-values", "some-nulls", "mixed-sizes"]


@pytest.mark.parametrize("n", [1, 10, 100, 1000])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_against_kafka_python(shape, n):
    """Each shape: our bytes, less deliverAfter, are the bytes kafka-python builds; kafka-python
    reads every field back; we read kafka-python's batch."""
    spec = shape_spec(shape, n)
    spec.base_offset = 0
    buf = spec.encode()
    kafka = spec.kafka_builder_bytes()
    assert to_kafka_v2(buf) == kafka
    kb = DefaultRecordBatch(to_kafka_v2(buf))
    assert kb.validate_crc()
    exp = spec.expected()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    assert got == list(zip(range(n), exp.timestamps, exp.keys, exp.values, exp.headers,
                           strict=True))
    assert decode(buf) == exp
    assert decode(from_kafka_v2(kafka, spec.deliver_after)) == exp
    assert from_kafka_v2(kafka, spec.deliver_after) == buf
    # decoded header lists are shared between records (and batches) with the same headers,
    # so they refuse changes; a copy is the caller's own
    cols = decode(buf)
    for hs in cols.headers:
        with pytest.raises(TypeError, match="read-only"):
            hs.append(("x", b"y"))
        mine = list(hs)
        mine.append(("x", b"y"))
    assert decode(buf) == exp


def test_offset_delta_varints_past_8192():
    """Three record-size groups in one homogeneous batch (offset deltas of 1, 2, 3 bytes)."""
    n = 8300
    spec = Spec([b"k%04d" % (i % 10000) for i in range(n)], [b"v"] * n)
    buf = spec.encode()
    assert to_kafka_v2(buf) == spec.kafka_builder_bytes()
    assert decode(buf) == spec.expected()




@SETTINGS
@given(n=st.integers(1, 300), kl=st.integers(-1, 200), vl=st.integers(-1, 300),
       seed=st.integers(0, 2**32))
def test_explicit_zero_deltas_and_empty_headers_are_the_same_batch(n, kl, vl, seed):
    rng = random.Random(seed)
    keys = [None if kl < 0 else _blob(rng, kl) for _ in range(n)]
    values = [None if vl < 0 else _blob(rng, vl) for _ in range(n)]
    spec = Spec(keys, values)
    buf = spec.encode()
    same = codec.encode_batch(base_offset=0, base_timestamp=BASE_TS,
                              deliver_after=BASE_TS + 5000, keys=keys, values=values,
                              timestamp_deltas=np.zeros(n, np.int64),
                              headers=[[] for _ in range(n)])
    assert same == buf
    assert decode(buf) == spec.expected()


@SETTINGS
@given(n=st.integers(1, 300), kl=st.integers(-1, 40), vl=st.integers(-1, 120),
       spread=st.sampled_from([0, 1, 63, 64, 65, 200, 1 << 40]), seed=st.integers(0, 2**32),
       header=st.sampled_from([None, [("kdelay.attempt", b"3")], [("a", None), ("b", b"")],
                               "differ", "some"]))
def test_deltas_as_list_or_array_and_header_sets(n, kl, vl, spread, seed, header):
    """Timestamp deltas given as a list or an int64 array write the same bytes, whatever
    their widths; one header set on every record, differing sets, and sets on some records
    read back as written."""
    rng = random.Random(seed)
    keys = [None if kl < 0 else _blob(rng, kl) for _ in range(n)]
    values = [None if vl < 0 else _blob(rng, vl) for _ in range(n)]
    deltas = [0] + [rng.randint(-spread, spread) for _ in range(n - 1)]
    if header == "differ":
        headers = [[("h", b"%d" % (i % 2))] for i in range(n)]
    elif header == "some":
        headers = [[("h", b"x")] if i % 3 == 1 else [] for i in range(n)]
    else:
        headers = None if header is None else [list(header) for _ in range(n)]
    bufs = [codec.encode_batch(base_offset=0, base_timestamp=BASE_TS, deliver_after=BASE_TS,
                               keys=keys, values=values, timestamp_deltas=ts, headers=headers)
            for ts in (deltas, np.array(deltas, np.int64))]
    assert bufs[0] == bufs[1]
    got = decode(bufs[0])
    assert got.timestamps == [BASE_TS + d for d in deltas]
    assert (got.keys, got.values) == (keys, values)
    assert got.headers == (headers or [[] for _ in range(n)])


def test_bad_arguments():
    with pytest.raises(InvalidRecordError):
        codec.encode_batch(base_offset=0, base_timestamp=0, deliver_after=0, keys=[], values=[])
    with pytest.raises(InvalidRecordError):
        codec.encode_batch(base_offset=0, base_timestamp=0, deliver_after=0, keys=[None],
                           values=[b"a", b"b"])


# ---------------------------------------------------------------------------- header layout


@SETTINGS
@given(specs(max_records=80), st.integers(0, 2**63 - 1))
def test_header_layout(spec, deliver_after):
    spec.deliver_after = deliver_after
    buf = spec.encode()
    assert len(buf) == codec.parse_header(buf).size
    assert struct.unpack_from(">q", buf, 0)[0] == spec.base_offset
    assert struct.unpack_from(">i", buf, 8)[0] == len(buf) - 12
    assert buf[16] == 3
    assert struct.unpack_from(">I", buf, 17)[0] == crc32c.crc32c(buf[21:])
    assert struct.unpack_from(">h", buf, 21)[0] == 0
    assert struct.unpack_from(">i", buf, 23)[0] == spec.n - 1
    assert struct.unpack_from(">q", buf, 27)[0] == spec.base_ts
    assert struct.unpack_from(">q", buf, 35)[0] == max(spec.timestamps())
    assert struct.unpack_from(">q", buf, 43)[0] == deliver_after
    assert struct.unpack_from(">qhii", buf, 51) == (-1, -1, -1, spec.n)
    assert codec.crc_ok(buf, 0, codec.parse_header(buf))
    # inside a larger buffer at an offset
    big = b"\x00" * 7 + buf + b"\x01" * 5
    h = codec.parse_header(big, 7)
    codec.check_crc(big, 7, h)


def test_header_constants_are_those_of_the_documented_layout():
    """Worked out from HEADER's format, they land where docs/formats.md puts the fields."""
    assert (codec.MAGIC_OFFSET, codec.CRC_OFFSET, codec.CRC_START,
            codec.DELIVER_AFTER_OFFSET, codec.LOG_OVERHEAD) == (16, 17, 21, 43, 12)
    assert codec.MIN_BATCH_LENGTH == 57
    assert codec._HEAD.size == codec.CRC_START
    assert codec._HEAD.size + codec._TAIL.size == codec.HEADER_SIZE


# ---------------------------------------------------------------------------- varints


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=40))
def test_varints_match_kafka(values):
    ref = bytearray()
    for v in values:
        encode_varint(v, ref.append)
    assert b"".join(varint.encode_one(v) for v in values) == bytes(ref)
    pos = 0
    for v in values:
        assert decode_varint(ref, pos)[0] == v
        d, pos = varint.decode_one(ref, pos)
        assert d == v


def test_timestamp_deltas_at_the_int64_ends():
    """The compiled coder's varints at their widest: deltas of +-2**62 and the ends of
    int64, read back by kafka-python and by our decoder."""
    base = 1 << 62
    deltas = [0, (1 << 62) - 1, -(1 << 62), 1, -1, (1 << 63) - 1 - base, -base]
    spec = Spec([b"k"] * len(deltas), [b"v"] * len(deltas), deltas, base_ts=base)
    buf = spec.encode()
    assert to_kafka_v2(buf) == spec.kafka_builder_bytes()
    assert decode(buf) == spec.expected()


def test_overlong_varint_is_an_error():
    with pytest.raises(ValueError):
        varint.decode_one(b"\x80" * 11, 0)


# ---------------------------------------------------------------------------- corruption


def _checked_decode(buf: bytes):
    """What a reader does: header, CRC, records. Only CorruptLogError may escape."""
    try:
        h = codec.parse_header(buf, path="x.log", file_pos=0)
        codec.check_crc(buf, 0, h, path="x.log", file_pos=0)
        return codec.decode_records(buf, h, path="x.log", file_pos=0)
    except CorruptLogError as e:
        assert e.path == "x.log"
        return None


@SETTINGS
@given(specs(max_records=150), st.data())
def test_bit_flips_truncation_garbage(spec, data):
    buf = spec.encode()
    expected = spec.expected()
    # bit flips: bytes 0..16 (base offset, length, epoch) are outside the CRC, so a flip
    # there may leave the records readable, but never different
    for pos in data.draw(st.lists(st.integers(0, len(buf) - 1), min_size=1, max_size=20)):
        bad = bytearray(buf)
        bad[pos] ^= 1 << data.draw(st.integers(0, 7))
        got = _checked_decode(bytes(bad))
        assert got is None or got == expected
        if pos >= 16:
            assert got is None
    # truncation
    for cut in data.draw(st.lists(st.integers(0, len(buf) - 1), min_size=1, max_size=10)):
        assert _checked_decode(buf[:cut]) is None
    # garbage over a range
    start = data.draw(st.integers(0, len(buf) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=64))
    bad = (buf[:start] + junk + buf[start + len(junk):])[:len(buf)]
    got = _checked_decode(bad)
    assert got is None or got == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=400))
def test_random_bytes_never_crash(blob):
    got = _checked_decode(blob)
    assert got is None or isinstance(got, codec.RecordColumns)


def _bypass_crc(buf: bytes) -> codec.RecordColumns | None:
    """decode_records on bytes whose CRC was never checked: CorruptLogError or columns."""
    try:
        h = codec.parse_header(buf)
    except CorruptLogError:
        return None
    try:
        cols = codec.decode_records(buf, h)
    except CorruptLogError:
        return None
    n = h.record_count
    assert len(cols.timestamps) == len(cols.keys) == len(cols.values) == len(cols.headers) == n
    assert all(k is None or type(k) is bytes for k in cols.keys)
    assert all(v is None or type(v) is bytes for v in cols.values)
    assert all(isinstance(hk, str) and (hv is None or type(hv) is bytes)
               for hs in cols.headers for hk, hv in hs)
    return cols


def _with_length_and_count(buf: bytearray, count: int | None = None) -> bytes:
    """Fix up batchLength (and optionally the record count) so parse_header accepts the
    mutated bytes and decode_records gets to see them."""
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    if count is not None:
        struct.pack_into(">i", buf, 23, count - 1)
        struct.pack_into(">i", buf, 65, count)
    return bytes(buf)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(specs(max_records=100), st.data())
def test_decode_without_crc_only_raises_corrupt(spec, data):
    buf = spec.encode()
    body = len(buf) - codec.HEADER_SIZE
    ops = data.draw(st.lists(st.tuples(
        st.sampled_from(["set", "flip", "insert", "delete", "count", "varint"]),
        st.integers(0, body - 1), st.integers(0, 255)), min_size=1, max_size=6))
    bad = bytearray(buf)
    count = None
    for op, at, val in ops:
        at = codec.HEADER_SIZE + at % max(1, len(bad) - codec.HEADER_SIZE)
        if op == "set":
            bad[at] = val
        elif op == "flip":
            bad[at] ^= 1 << (val % 8)
        elif op == "insert":
            bad[at:at] = bytes([val])
        elif op == "delete" and len(bad) > codec.HEADER_SIZE + 1:
            del bad[at]
        elif op == "count":
            count = max(1, spec.n + (val % 7) - 3)
        elif op == "varint":  # a long run of continuation bytes
            bad[at:at + 12] = b"\xff" * 12
    _bypass_crc(_with_length_and_count(bad, count))


def test_decode_without_crc_edge_cases():
    spec = Spec([b"abc"] * 5, [b"hello"] * 5)
    buf = bytearray(spec.encode())
    # a huge record count cannot make the decoder allocate or loop over it
    assert _bypass_crc(_with_length_and_count(bytearray(buf), 2**31 - 1)) is None
    # huge key length varint (would overflow int64 positions if unchecked)
    bad = bytearray(buf)
    pos = codec.HEADER_SIZE + 1 + 3  # length varint, attributes, ts, offset -> key length
    bad[pos:pos + 1] = b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01"
    assert _bypass_crc(_with_length_and_count(bad)) is None
    # a batch that ends inside the records
    assert _bypass_crc(_with_length_and_count(bytearray(buf[:-3]))) is None
    # a header count far beyond the record
    h_spec = Spec([b"k"], [b"v"], headers=[[("a", b"b")]])
    hb = bytearray(h_spec.encode())
    hb[-5] = 0x7E  # header count varint -> 63
    assert _bypass_crc(bytes(hb)) is None
    # invalid utf-8 in a header key
    hb = bytearray(h_spec.encode())
    hb[-3] = 0xFF
    assert _bypass_crc(bytes(hb)) is None


def test_decode_records_error_names_file_and_position():
    buf = bytearray(Spec([b"abc"] * 3, [b"hello"] * 3).encode())
    bad = _with_length_and_count(bytearray(buf[:-2]))
    h = codec.parse_header(bad)
    with pytest.raises(CorruptLogError) as e:
        codec.decode_records(bad, h, path="seg.log", file_pos=4096)
    assert e.value.path == "seg.log" and e.value.position == 4096
    assert "seg.log" in str(e.value) and "4096" in str(e.value)


def test_encode_kernel_refuses_lengths_that_do_not_add_up():
    """The compiled encoder checks its columns against its buffers before writing (C does
    not check indexes): a mismatch is refused, never a read past a buffer."""
    from kdelay.log.batch import record_loops

    none, no_bytes = np.empty(0, np.int64), np.empty(0, np.uint8)
    out = np.zeros(4096, np.uint8)
    data = np.frombuffer(b"kkvvvv", np.uint8)

    def enc(lengths, payloads=data, deltas=none, hl=none, hb=no_bytes, buf=out):
        return record_loops.encode_records(69, np.array(lengths, np.int64), payloads, deltas, hl,
                                      hb, buf)[0]

    assert enc([2, 4]) > 69
    assert enc([2, 40]) == -1  # more than the payloads hold
    assert enc([2, 3]) == -1  # less
    assert enc([-2, 6]) == -1
    assert enc([2, 4], deltas=np.zeros(3, np.int64)) == -1
    assert enc([2, 4], hl=np.array([5]), hb=np.frombuffer(b"\x00", np.uint8)) == -1
    assert enc([2, 4], buf=np.zeros(70, np.uint8)) == -1  # no room


def test_chunk_kernel_flags_a_batch_past_its_buffer():
    from kdelay.log.batch import record_loops

    blob = codec.encode_batch(base_offset=0, base_timestamp=BASE_TS, deliver_after=BASE_TS,
                              keys=[b"k"] * 3, values=[b"v"] * 3)
    buf = np.frombuffer(blob, np.uint8)
    cols = [np.empty(3, np.int64) for _ in range(5)]
    ok = np.empty(1, bool)
    record_loops.scan_chunk(buf, codec.HEADER_SIZE, np.array([0]), np.array([len(blob)]), np.array([3]),
                       np.array([BASE_TS]), *cols, ok)
    assert ok[0] and cols[2].tolist() == [1, 1, 1]
    record_loops.scan_chunk(buf, codec.HEADER_SIZE, np.array([0]), np.array([len(blob) + 100]), np.array([3]),
                       np.array([BASE_TS]), *cols, ok)
    assert not ok[0] and cols[2].tolist() == [0, 0, 0]


def test_malformed_header_block_is_corrupt_not_index_error():
    """A header block whose count promises more than it holds (the record length still
    tiles the batch) is a CorruptLogError, like every other malformed batch."""
    blob = bytearray(codec.encode_batch(base_offset=0, base_timestamp=BASE_TS,
                                        deliver_after=BASE_TS, keys=[b"k"], values=[b"v"],
                                        headers=[[("ab", b"c")]]))
    at = blob.index(b"ab") - 2  # the header count, before the key's length
    assert blob[at] == 2  # zigzag(1)
    for count in (4, 6, 0x7E):  # 2, 3, 63 headers in a block that holds one
        bad = bytearray(blob)
        bad[at] = count
        with pytest.raises(CorruptLogError):
            codec.decode_records(bytes(bad), codec.parse_header(bytes(bad)))
