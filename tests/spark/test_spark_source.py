"""kdelay.spark: the PySpark reader, pushdown, offline verify and forecast.

The columnar decoder is checked against the engine's codec without Spark (hypothesis);
everything else runs on one session-scoped local[2] SparkSession. Where pyspark, pyarrow or
Java is missing they are skipped, except in CI, where that fails (tests/conftest.py).
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import numpy as np
import pytest
from conftest import have_spark, skip_module_without_spark_libraries

skip_module_without_spark_libraries()

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kdelay import Log, LogConfig, Record  # noqa: E402
from kdelay.log.batch import codec  # noqa: E402
from kdelay.log.segments.layout import segment_bases, segment_file, segment_name  # noqa: E402
from kdelay.spark import columnar, scan  # noqa: E402

T0 = 1_700_000_000_000


# ---------------------------------------------------------------------------- data


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t


def _batches(seed: int):
    """A mix of batch shapes: homogeneous, null keys, varied lengths, headers, timestamps,
    and sizes around the 64-record varint boundary."""
    import random

    rng = random.Random(seed)
    for i in range(120):
        n = rng.choice([1, 3, 63, 64, 65, 100])
        kind = i % 5
        if kind == 0:
            recs = [Record(rng.randbytes(100), key=rng.randbytes(8)) for _ in range(n)]
        elif kind == 1:
            recs = [Record(rng.randbytes(rng.randint(0, 40))) for _ in range(n)]
        elif kind == 2:
            recs = [Record(rng.randbytes(7), key=b"",
                           headers=[("h", b"x")] if j % 3 == 0 else []) for j in range(n)]
        elif kind == 3:
            recs = [Record(rng.randbytes(20), key=b"k%d" % j, timestamp=T0 - 5000 + 37 * j)
                    for j in range(n)]
        else:
            recs = [Record(b"", key=rng.randbytes(13)) for _ in range(n)]
        yield recs, T0 + rng.randint(0, 600_000)


def _write_log(path: str, seed: int = 1, segment_bytes: int = 40_000) -> None:
    clock = Clock()
    with Log.open(path, config=LogConfig(segment_bytes=segment_bytes), clock=clock) as log:
        for recs, da in _batches(seed):
            clock.t += 1
            log.append(recs, deliver_after=da)


def _engine_rows(path: str) -> list[tuple]:
    out = []
    with Log.open(path) as log:
        off = log.log_start_offset
        while True:
            got = log.read(off, max_records=5000)
            if not got:
                break
            out.extend((r.offset, r.deliver_after, r.timestamp, r.key, r.value) for r in got)
            off = got[-1].offset + 1
    return out


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("kspark")
    _write_log(str(root / "log"))
    # a topic-style root: two partitions of "orders", one of "pay"
    for name, seed in (("orders-0", 2), ("orders-1", 3), ("pay-0", 4)):
        _write_log(str(root / "topic" / name), seed=seed)
    return str(root)


def _copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------------------- no Spark


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=30)),
                          st.one_of(st.none(), st.binary(max_size=60)),
                          st.integers(0, 3),
                          st.sampled_from([0, 0, 0, 1, 90_000_000])),
                min_size=1, max_size=80),
       st.integers(1, 3))
def test_columnar_matches_codec(records, copies):
    """The Arrow decoder gives exactly what the engine's codec decodes, for any
    batch shape, several batches per chunk."""
    blobs = []
    for c in range(copies):
        keys = [k for k, _, _, _ in records]
        values = [v for _, v, _, _ in records]
        headers = [[(f"h{j}", b"v") for j in range(h)] for _, _, h, _ in records]
        deltas = [d * i for i, (_, _, _, d) in enumerate(records)]
        blobs.append(codec.encode_batch(base_offset=1000 + c * len(records),
                                        base_timestamp=T0, deliver_after=T0 + c,
                                        keys=keys, values=values, timestamp_deltas=deltas,
                                        headers=headers if any(headers) else None))
    buf = bytearray(sum(map(len, blobs)))
    rels, pos = [], 0
    for blob in blobs:
        buf[pos:pos + len(blob)] = blob
        rels.append(pos)
        pos += len(blob)
    chunk = columnar.Chunk.parse(buf, rels, [r + 5 for r in rels])
    got = []
    for rb in columnar.records_to_arrow(chunk, segment=1000):
        got.extend(rb.to_pylist())
    want = []
    for c, blob in enumerate(blobs):
        h = codec.parse_header(blob)
        ts, keys, values, _ = codec.decode_records(blob, h)
        for i in range(h.record_count):
            want.append({"segment": 1000, "batch_base_offset": h.base_offset,
                         "position": rels[c] + 5, "offset": h.base_offset + i,
                         "deliver_after": T0 + c, "timestamp": ts[i], "key": keys[i],
                         "value": values[i], "crc_valid": True, "cancelled": False})
    assert got == want


def test_columnar_fast_path_steps_over_headers():
    """Retried records carry a header: their batches stay on the fast path (no fallback to
    the codec per batch), with the same rows; a header block that does not fit its record
    is refused there (and left to the codec)."""
    blob = codec.encode_batch(base_offset=0, base_timestamp=T0, deliver_after=T0,
                              keys=[b"k%d" % i for i in range(10)], values=[b"v" * 20] * 10,
                              timestamp_deltas=list(range(10)),
                              headers=[[("kdelay.attempt", b"3")]] * 10)
    buf = bytearray(len(blob))
    buf[:len(blob)] = blob
    h = codec.parse_header(blob)
    args = (np.frombuffer(buf, dtype=np.uint8), np.array([0]), np.array([h.size]),
            np.array([10]), np.array([T0]))
    fields = columnar._decode_fields(*args)
    assert fields.ok.all()
    ts, keys, values, _ = codec.decode_records(blob, h)
    assert fields.timestamps.tolist() == ts
    (rb,) = columnar.records_to_arrow(columnar.Chunk.parse(buf, [0]), segment=0)
    assert rb.column("key").to_pylist() == keys and rb.column("value").to_pylist() == values
    # the header count says more headers than the record has bytes for
    at = blob.index(b"kdelay.attempt") - 2  # the count byte, before the key's length
    assert blob[at] == 2  # zigzag(1)
    buf[at] = 0x7E  # 63 headers
    assert not columnar._decode_fields(*args).ok.any()


def test_columnar_damaged_batch_is_flagged_not_fatal():
    """A batch whose CRC fails still yields what decodes, with crc_valid False; one whose
    records do not parse becomes a single placeholder row."""
    good = codec.encode_batch(base_offset=0, base_timestamp=T0, deliver_after=T0,
                              keys=[b"k"] * 3, values=[b"v" * 10] * 3)
    flipped = bytearray(good)
    flipped[-3] ^= 0xFF  # inside the last value: CRC fails, framing holds
    broken = bytearray(good)
    broken[codec.HEADER_SIZE] = 0x7E  # first record's length: records no longer tile
    buf = bytearray(len(good) * 3)
    for i, blob in enumerate((good, bytes(flipped), bytes(broken))):
        buf[i * len(good):(i + 1) * len(good)] = blob
    chunk = columnar.Chunk.parse(buf, [0, len(good), 2 * len(good)])
    rows = [r for rb in columnar.records_to_arrow(chunk, segment=0) for r in rb.to_pylist()]
    assert [r["crc_valid"] for r in rows] == [True] * 3 + [False] * 3 + [False]
    assert rows[5]["value"] == b"v" * 8 + bytes([ord("v") ^ 0xFF]) + b"v"
    assert rows[6]["value"] is None and rows[6]["position"] == 2 * len(good)


def test_scan_stops_at_framing_error(tmp_path):
    path = _copy_log_with(tmp_path, lambda p: _truncate(p, -10))
    base = segment_bases(path)[-1]
    reader = scan.SegmentReader(path, base)
    n = sum(len(c.batches) for c in reader.chunks())
    assert reader.stats.error is not None and "truncated" in reader.stats.error
    assert n == reader.stats.batches_read and n > 0


@pytest.mark.parametrize("chunk_bytes", [4096, 9000])
@pytest.mark.parametrize("use_index", [False, True])
def test_rows_outlive_the_reused_read_buffers(data_root, chunk_bytes, use_index):
    """The reader reads each chunk into one of two buffers in turn; Arrow rows built from a
    chunk must own their bytes, so rows kept while later chunks overwrite the buffers
    still equal the engine's records (index mode: a deliverAfter filter that keeps all)."""
    path = os.path.join(data_root, "log")
    bounds = scan.Bounds()
    if use_index:
        bounds.narrow("deliver_after", T0 - 1, T0 + 10**9)
    kept, buffers = [], set()
    for base in segment_bases(path):
        reader = scan.SegmentReader(path, base, bounds, chunk_bytes=chunk_bytes)
        for ch in reader.chunks():
            buffers.add(id(ch.buf.obj))
            kept.extend(columnar.records_to_arrow(ch, segment=base))
        assert reader.stats.error is None
        if use_index and base != segment_bases(path)[-1]:
            assert reader.stats.mode == "index"
    assert len(buffers) < len(kept)  # buffers were reused
    got = sorted((r["offset"], r["deliver_after"], r["timestamp"], r["key"], r["value"])
                 for rb in kept for r in rb.to_pylist())
    assert got == _engine_rows(path)


def _rewrite_last_deliver_after(path: str, base: int) -> str:
    """Rewrite a segment's .dlyindex, valid and current, with its last entry's deliverAfter
    moved one ms later (so the entries stay sorted). Returns the index file's path."""
    import numpy as np

    from kdelay.index.index_file import HEADER_SIZE, IndexMeta, read_meta, write_index

    dly = os.path.join(path, segment_name(base) + ".dlyindex")
    meta, _ = read_meta(dly, b"KDLYIDX1")
    raw = np.fromfile(dly, dtype=np.uint8)[HEADER_SIZE:]
    n = meta.entries
    da = raw[:8 * n].view("<i8").copy()
    da[-1] += 1
    cols = [da, raw[8 * n:16 * n].view("<i8"), raw[16 * n:24 * n].view("<i8"),
            raw[24 * n:28 * n].view("<i4"), raw[28 * n:32 * n].view("<i4")]
    write_index(dly, b"KDLYIDX1", IndexMeta(*meta), cols)
    return dly


def _truncate(path: str, delta: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) + delta)


def _copy_log_with(tmp_path, damage) -> str:
    path = str(tmp_path / "log")
    _write_log(path, segment_bytes=1 << 20)
    damage(segment_file(path, segment_bases(path)[-1], ".log"))
    return path


# ---------------------------------------------------------------------------- Spark


def _rows(df) -> list[tuple]:
    return sorted((r["offset"], r["deliver_after"], r["timestamp"], r["key"], r["value"])
                  for r in df.collect())


def _stats(directory: str) -> list[dict]:
    return [json.load(open(f)) for f in glob.glob(os.path.join(directory, "*.json"))]


@pytest.mark.spark
@pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")
class TestSpark:
    def test_reader_equals_log_read(self, spark, data_root):
        import kdelay.spark

        path = os.path.join(data_root, "log")
        df = kdelay.spark.read_log(spark, path)
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
            ("segment", "bigint"), ("batch_base_offset", "bigint"), ("position", "bigint"),
            ("offset", "bigint"), ("deliver_after", "bigint"), ("timestamp", "bigint"),
            ("key", "binary"), ("value", "binary"), ("crc_valid", "boolean"),
            ("cancelled", "boolean")]
        rows = df.collect()
        assert all(r["crc_valid"] for r in rows)
        assert len({r["segment"] for r in rows}) == len(segment_bases(path)) > 2
        assert _rows(df) == _engine_rows(path)
        # the format name works too
        assert spark.read.format("kdelay").load(path).count() == len(rows)

    def test_pushdown_same_rows_fewer_batches(self, spark, data_root, tmp_path):
        import kdelay.spark

        path = os.path.join(data_root, "log")
        where = (f"deliver_after >= {T0 + 100_000} AND deliver_after < {T0 + 200_000} "
                 "AND offset >= 400")
        d_on, d_off = str(tmp_path / "on"), str(tmp_path / "off")
        on = kdelay.spark.read_log(spark, path, statsDir=d_on).where(where)
        off = kdelay.spark.read_log(spark, path, statsDir=d_off, pushdown="false").where(where)
        rows_on, rows_off = _rows(on), _rows(off)
        assert rows_on == rows_off and rows_on
        read_on = sum(s["batches_read"] for s in _stats(d_on))
        read_off = sum(s["batches_read"] for s in _stats(d_off))
        assert read_off == 120 and 0 < read_on < read_off / 3
        assert {s["mode"] for s in _stats(d_on)} == {"index"}
        assert len(_stats(d_on)) <= len(_stats(d_off))  # whole segments skipped too

        # without indexes the reader walks headers: same rows, still fewer batches read
        bare = _copy(path, str(tmp_path / "bare"))
        for f in glob.glob(os.path.join(bare, "*.dlyindex")):
            os.remove(f)
        d_bare = str(tmp_path / "bare-stats")
        assert _rows(kdelay.spark.read_log(spark, bare, statsDir=d_bare).where(where)) == rows_on
        st_bare = _stats(d_bare)
        assert {s["mode"] for s in st_bare} == {"scan"}
        assert sum(s["batches_read"] for s in st_bare) == read_on

        # contradictory filters read nothing at all
        assert kdelay.spark.read_log(spark, path).where("offset > 10 AND offset < 5").count() == 0

    def test_topic_layout(self, spark, data_root):
        import kdelay.spark

        root = os.path.join(data_root, "topic")
        df = kdelay.spark.read_log(spark, root)
        assert df.columns[:2] == ["topic", "partition"]
        got = {(r["topic"], r["partition"]): r["n"]
               for r in df.groupBy("topic", "partition").count().withColumnRenamed("count", "n")
               .collect()}
        want = {(t, p): len(_engine_rows(os.path.join(root, f"{t}-{p}")))
                for t, p in (("orders", 0), ("orders", 1), ("pay", 0))}
        assert got == want
        one = df.where("topic = 'orders' AND partition = 1")
        assert _rows(one) == sorted(_engine_rows(os.path.join(root, "orders-1")))
        assert kdelay.spark.verify(spark, root).ok

    def test_verify_clean_log(self, spark, data_root):
        import kdelay.spark

        path = os.path.join(data_root, "log")
        report = kdelay.spark.verify(spark, path)
        assert report.ok, str(report)
        assert report.problems == [] and report.warnings == []
        assert report.counts["batches"] == 120 and report.counts["crc_errors"] == 0
        assert report.counts["index_files_checked"] == len(segment_bases(path))
        assert report.counts["records"] == len(_engine_rows(path))

    def test_verify_catches_damage(self, spark, data_root, tmp_path):
        """One copy of the log, damaged five ways; each problem is reported with its file
        and the byte position of the bad batch, and nothing else is."""
        import kdelay.spark

        path = _copy(os.path.join(data_root, "log"), str(tmp_path / "log"))
        bases = segment_bases(path)
        assert len(bases) >= 5

        # 1. a flipped byte inside a value of a batch in segment 1
        batches = []  # (position, size, record count, base offset)
        for c in scan.SegmentReader(path, bases[1]).chunks():
            h = c.batches
            batches += zip(c.positions.tolist(), h.size.tolist(), h.record_count.tolist(),
                           h.base_offset.tolist(), strict=True)
        victim_pos, victim_size, _, victim_base = next(
            b for b in batches if (b[1] - codec.HEADER_SIZE) / b[2] > 100)
        flipped_log = segment_file(path, bases[1], ".log")
        with open(flipped_log, "r+b") as f:
            at = victim_pos + victim_size - 2  # last value byte of the batch
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x01]))

        # 2. segment 2's index: well-formed and current, but one entry is wrong
        wrong_dly = _rewrite_last_deliver_after(path, bases[2])

        # 3. segment 3 missing: offsets jump from segment 2's end to segment 4's base
        for f in glob.glob(os.path.join(path, segment_name(bases[3]) + ".*")):
            os.remove(f)

        # 4. the last segment loses its last 5 bytes (torn tail), which also makes
        # 5. its .dlyindex stale
        last_log = segment_file(path, bases[-1], ".log")
        _truncate(last_log, -5)

        report = kdelay.spark.verify(spark, path)
        assert not report.ok
        by_kind: dict[str, list] = {}
        for p in report.problems:
            by_kind.setdefault(p.kind, []).append(p)
        assert sorted(by_kind) == ["crc", "framing", "index", "offset"], str(report)
        assert [(p.file, p.position) for p in by_kind["crc"]] == [(flipped_log,
                                                                   victim_pos)]
        (gap,) = by_kind["offset"]
        assert (gap.file, gap.position) == (segment_file(path, bases[4], ".log"), 0)
        assert f"expected {bases[3]}" in gap.message
        (torn,) = by_kind["framing"]
        assert torn.file == last_log and torn.position is not None
        assert "truncated" in torn.message
        index_problems = {p.file: p for p in by_kind["index"]}
        last_dly = os.path.join(path, segment_name(bases[-1]) + ".dlyindex")
        assert set(index_problems) == {wrong_dly, last_dly}
        assert "stale" in index_problems[last_dly].message
        assert index_problems[wrong_dly].position is not None
        assert report.counts["crc_errors"] == 1 and report.counts["offset_errors"] == 1

        # the reader keeps going: the flipped batch's rows are flagged, the torn tail is
        # dropped, everything else is returned
        df = kdelay.spark.read_log(spark, path)
        bad = df.where("NOT crc_valid").select("batch_base_offset", "position").distinct()
        assert [tuple(r) for r in bad.collect()] == [(victim_base, victim_pos)]
        assert df.where(f"segment = {bases[-1]}").count() > 0

    def test_forecast_and_png(self, spark, data_root, tmp_path):
        import kdelay.spark
        from kdelay.spark.cli import cli_forecast

        path = os.path.join(data_root, "log")
        rows = kdelay.spark.forecast(spark, path, window="1 minute", all_records=True).collect()
        engine = _engine_rows(path)
        assert sum(r["count"] for r in rows) == len(engine)
        want: dict[int, int] = {}
        for _, da, *_ in engine:
            want[da // 60_000 * 60_000] = want.get(da // 60_000 * 60_000, 0) + 1
        # collect() gives naive local datetimes; .timestamp() reads them as local time
        got = {round(r["window_start"].timestamp() * 1000): r["count"] for r in rows}
        assert got == want
        pending = kdelay.spark.forecast(spark, path, "1 minute", after=T0 + 300_000).collect()
        assert sum(r["count"] for r in pending) == sum(1 for _, da, *_ in engine
                                                       if da > T0 + 300_000)
        png = str(tmp_path / "f.png")
        assert cli_forecast([path, "--window", "30 seconds", "--png", png]) == 0
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert not spark.sparkContext._jsc.sc().isStopped()  # the CLI left our session alone

    def test_cli_spark_verify(self, spark, data_root, tmp_path, capsys):
        from kdelay.spark import cli_spark_verify

        # (the healthy case's report is covered by test_verify_clean_log)
        path = os.path.join(data_root, "log")
        bad = _copy(path, str(tmp_path / "bad"))
        os.remove(glob.glob(os.path.join(bad, "*.dlyindex"))[0])
        assert cli_spark_verify([bad, "--json"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert doc["ok"] is False and doc["problems"][0]["kind"] == "index"
        assert cli_spark_verify([str(tmp_path / "nope")]) == 2
