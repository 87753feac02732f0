"""df.write.format("kdelay"): round trips checked by the engine's own Log.fetch, batching,
partitioning, locking between tasks, and what a failed job leaves."""

from __future__ import annotations

import os
import time

import pytest
from conftest import have_spark, skip_module_without_spark_libraries

skip_module_without_spark_libraries()

from kdelay import Log  # noqa: E402
from kdelay.clients.partitioner import partition_for_key  # noqa: E402
from kdelay.log.segments.layout import segment_bases  # noqa: E402
from kdelay.spark import scan  # noqa: E402

T0 = 1_700_000_000_000
FUT = time.time_ns() // 1_000_000 + 86_400_000  # explicit deliverAfters: tomorrow
FAR = 1 << 60  # a log clock at which every record is due

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")]

SCHEMA = "value binary, key binary, deliver_after bigint, timestamp bigint"


def _fetch_all(path: str) -> list:
    """Every record of the log at `path`, through Log.fetch, in delivery order."""
    out, after = [], None
    with Log.open(path, clock=lambda: FAR) as log:
        while True:
            res = log.fetch(after, max_records=5000, max_bytes=1 << 26)
            if not res.records:
                return out
            out.extend(res.records)
            after = res.next


def _batch_sizes(path: str) -> list[tuple[int, int]]:
    """(deliver_after, record count) of every batch, in file order."""
    out = []
    for base in segment_bases(path):
        for c in scan.SegmentReader(path, base).chunks():
            out += zip(c.batches.deliver_after.tolist(), c.batches.record_count.tolist(),
                       strict=True)
    return out


def _rows(n: int) -> list[tuple]:
    rows = []
    for i in range(n):
        key = None if i % 11 == 0 else b"key-%d" % (i % 37)
        da = None if i % 5 == 0 else FUT + (i % 4) * 1000
        ts = None if i % 3 == 0 else T0 - i
        rows.append((b"value-%d" % i, key, da, ts))
    return rows


def test_packed_batches_write_what_python_lists_write(tmp_path):
    """The writer hands the engine Arrow's buffers as PackedBinary (sliced arrays, null
    keys and values, timestamps or none); the bytes on disk are those of the same rows
    appended as Python lists. Rows with some null timestamps, or a null value holding
    bytes (legal in Arrow), take the list path."""
    import numpy as np
    import pyarrow as pa

    from kdelay.spark import writer

    vals = pa.array([b"v0", None, b"", b"value-3" * 9, None, b"v5"], pa.binary())
    keys = pa.array([None, b"k1", b"key-2", None, b"k4", b""], pa.binary())
    stamps = pa.array([T0 + i for i in range(6)], pa.int64())
    some_null = pa.array([T0, None, T0 + 2, None, T0 + 4, T0 + 5], pa.int64())
    # a null whose slot holds bytes: offsets 0, 2, 4 with the second slot null
    odd = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(np.packbits(
        [1, 0], bitorder="little")), pa.py_buffer(np.array([0, 2, 4], np.int32)),
        pa.py_buffer(b"abcd")])
    cases = [(vals, keys, stamps), (vals.slice(1, 4), keys.slice(1, 4), stamps.slice(1, 4)),
             (vals, None, None), (vals, keys, pa.nulls(6, pa.int64())),
             (vals, keys, some_null), (odd, None, None)]
    for i, (v, k, t) in enumerate(cases):
        cols = {"value": v} | ({} if k is None else {"key": k}) | \
            ({} if t is None else {"timestamp": t})
        rows = writer._Rows(pa.table(cols))
        packed, kw = rows.batch(0, len(v))
        assert isinstance(packed, list) == (i >= 4)
        with Log.open(str(tmp_path / f"p{i}"), clock=lambda: T0) as a, \
                Log.open(str(tmp_path / f"l{i}"), clock=lambda: T0) as b:
            a.append_columns(packed, **kw, deliver_after=T0)
            if i == 4:  # a batch without the null stamps packs
                assert not isinstance(rows.batch(4, 6)[0], list)
            b.append_columns(v.to_pylist(), keys=None if k is None else k.to_pylist(),
                             timestamps=None if t is None else t.to_pylist(),
                             deliver_after=T0)
        name = "00000000000000000000.log"
        assert (tmp_path / f"p{i}" / name).read_bytes() == \
            (tmp_path / f"l{i}" / name).read_bytes()


def test_round_trip_topic_by_key(spark, tmp_path):
    root = str(tmp_path / "orders")
    rows = _rows(600)
    start = time.time_ns() // 1_000_000
    df = spark.createDataFrame(rows, SCHEMA).repartition(2)
    (df.write.format("kdelay").mode("append").option("partitions", "3")
     .option("batch_records", "7").save(root))
    seen = {}
    for p in range(3):
        path = os.path.join(root, f"orders-{p}")
        recs = _fetch_all(path)
        for r in recs:
            assert r.value not in seen
            seen[r.value] = (p, r)
        sizes = _batch_sizes(path)
        assert max(n for _, n in sizes) <= 7
    assert len(seen) == len(rows)
    for value, key, da, ts in rows:
        p, r = seen[value]
        assert r.key == key
        if key is not None:
            assert p == partition_for_key(key, 3)  # Kafka's partitioner
        if da is not None:
            assert r.deliver_after == da
        else:
            assert start <= r.deliver_after < FUT  # due at the append time (now)
        if ts is not None:
            assert r.timestamp == ts


def test_batches_group_by_partition_and_deliver_after(spark, tmp_path):
    path = str(tmp_path / "log")
    # one task: 1000 rows over 3 deliverAfter values, interleaved
    rows = [(b"v%d" % i, None, FUT + (i % 3), None) for i in range(1000)]
    spark.createDataFrame(rows, SCHEMA).coalesce(1).write.format("kdelay") \
        .mode("append").save(path)
    sizes = _batch_sizes(path)
    per_da: dict[int, list[int]] = {}
    for da, n in sizes:
        per_da.setdefault(da, []).append(n)
    # 334/333/333 rows per deliverAfter, 500 per batch: one batch each
    assert sorted(per_da) == [FUT, FUT + 1, FUT + 2]
    assert all(len(v) == 1 for v in per_da.values())
    # and the rows keep their input order within a batch
    recs = _fetch_all(path)
    assert [r.value for r in recs if r.deliver_after == FUT] == [b"v%d" % i for i in
                                                                range(0, 1000, 3)]


def test_partition_column_and_lock_contention(spark, tmp_path):
    """Eight tasks write to the same two partitions: each partition's Log is held by one
    task at a time (the others retry), and every row lands once."""
    root = str(tmp_path / "t")
    spark.createDataFrame([(b"x", 0)], "value binary, partition int").write \
        .format("kdelay").mode("append").option("partitions", "2").option("topic", "t") \
        .save(root)
    n = 4000
    df = spark.range(n).selectExpr("cast(cast(id as string) as binary) as value",
                                   "cast(id % 2 as int) as partition").repartition(8)
    df.write.format("kdelay").mode("append").option("batch_records", "50").save(root)
    got = {p: [r.value for r in _fetch_all(os.path.join(root, f"t-{p}"))] for p in (0, 1)}
    assert sorted(got[0]) == sorted([b"x"] + [b"%d" % i for i in range(0, n, 2)])
    assert sorted(got[1]) == sorted(b"%d" % i for i in range(1, n, 2))


def test_a_log_held_by_a_running_process_is_named_when_the_write_gives_up(spark, tmp_path):
    """This process holds the log open: the Spark tasks (other processes) wait out
    lockTimeoutMs, then fail naming this process and what to do."""
    path = str(tmp_path / "log")
    df = spark.createDataFrame([(b"v",)], "value binary")
    with Log.open(path), pytest.raises(Exception) as caught:
        df.write.format("kdelay").mode("append").option("lockTimeoutMs", "300").save(path)
    msg = str(caught.value)
    assert f"partitions [0] stayed locked for 0.3 s by process {os.getpid()};" in msg
    assert "stop that process (or close its Log) before writing" in msg


def test_failed_job_leaves_no_partial_batch(spark, tmp_path):
    """A task that fails while its rows are computed writes nothing; whatever other tasks
    wrote is whole batches of their rows, and the log opens cleanly."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    path = str(tmp_path / "log")

    @F.udf(BinaryType(), useArrow=False)  # a plain Python UDF: the spark extra has no pandas
    def boom(i):
        if i == 1500:
            raise ValueError("boom")
        return b"%d" % i

    df = spark.range(0, 2000, numPartitions=2).select(boom("id").alias("value"))
    with pytest.raises(Exception, match="boom"):
        df.write.format("kdelay").mode("append").option("batch_records", "64").save(path)
    if os.path.isdir(path) and segment_bases(path):
        values = [r.value for r in _fetch_all(path)]
        # only the first task's rows can be there, and then all of them
        assert sorted(values) in ([], sorted(b"%d" % i for i in range(1000)))
        for base in segment_bases(path):
            reader = scan.SegmentReader(path, base)
            assert all(c.crc_ok.all() for c in reader.chunks())
            assert reader.stats.error is None


def test_bad_input_is_refused(spark, tmp_path):
    path = str(tmp_path / "log")
    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([(b"k",)], "key binary").write.format("kdelay") \
            .mode("append").save(path)
    with pytest.raises(Exception, match="append"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("kdelay") \
            .mode("overwrite").save(path)
    with pytest.raises(Exception, match="deliver_after"):
        spark.createDataFrame([(b"v", -5)], "value binary, deliver_after bigint").write \
            .format("kdelay").mode("append").save(path)
    assert not segment_bases(path) if os.path.isdir(path) else True
