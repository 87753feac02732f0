"""Reading less: the `columns` option, `read_batches`, and the quiet command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from conftest import have_spark, skip_module_without_spark_libraries

skip_module_without_spark_libraries()

from kdelay import Log, LogConfig, Record, Topic  # noqa: E402
from kdelay.log.batch import codec  # noqa: E402
from kdelay.log.segments.layout import segment_bases  # noqa: E402
from kdelay.spark import BATCH_COLUMNS, columnar, scan  # noqa: E402
from kdelay.spark.cli import human_ms, pick_window  # noqa: E402

T0 = 1_700_000_000_000


def _write(path: str, clock: list) -> None:
    with Log.open(path, config=LogConfig(segment_bytes=8192), clock=lambda: clock[0]) as log:
        for i in range(60):
            clock[0] += 1
            log.append([Record(b"v%03d" % j * (1 + i % 3), key=None if j % 4 else b"k%d" % j)
                        for j in range(1 + i % 9)], deliver_after=T0 + (i * 7919) % 5000)


@pytest.fixture(scope="module")
def log_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("cols") / "log")
    _write(path, [T0])
    return path


# ---------------------------------------------------------------------------- no Spark


def test_columnar_subset_equals_the_full_decode(log_path):
    """Any column subset gives exactly the full decode's columns; payload columns not asked
    for are never built (a batch whose records cannot decode still yields header columns)."""
    for base in segment_bases(log_path):
        for ch in scan.SegmentReader(log_path, base).chunks():
            full = columnar.records_to_arrow(ch, segment=base)
            for cols in (["offset", "deliver_after"], ["value"], ["key", "crc_valid"],
                         ["deliver_after", "timestamp", "segment", "position",
                          "batch_base_offset"]):
                part = columnar.records_to_arrow(ch, segment=base, columns=cols)
                assert [rb.schema.names for rb in part] == [cols] * len(part)
                want = [rb.select(cols).to_pylist() for rb in full]
                assert [r for rb in part for r in rb.to_pylist()] == \
                    [r for rows in want for r in rows]
    # records that do not tile their batch: the header columns do not care
    blob = bytearray(codec.encode_batch(base_offset=0, base_timestamp=T0, deliver_after=T0,
                                        keys=[b"k"] * 3, values=[b"v" * 10] * 3))
    blob[codec.HEADER_SIZE] = 0x7E
    buf = bytearray(len(blob))
    buf[:len(blob)] = blob
    chunk = columnar.Chunk.parse(buf, [0])
    assert not chunk.crc_ok.any()
    (rb,) = columnar.records_to_arrow(chunk, segment=0, columns=["offset", "deliver_after"])
    assert rb.to_pylist() == [{"offset": i, "deliver_after": T0} for i in range(3)]


def test_small_segments_share_a_spark_task(tmp_path, monkeypatch):
    """Adjacent segments of one partition are grouped up to the byte target, in order, and
    a group never spans two partitions of a topic."""
    from kdelay.spark.source import group_plans

    log_path = str(tmp_path / "small")
    with Log.open(log_path, config=LogConfig(segment_bytes=600), clock=lambda: T0) as log:
        for i in range(40):
            log.append([Record(b"v%d" % i * 20)])
    plans = scan.plan_segments(scan.discover(log_path)[1], scan.Bounds())
    assert len(plans) > 5
    assert group_plans(plans, 0) == [[p] for p in plans]
    assert group_plans(plans) == [plans]
    # at least min_groups tasks where there are segments enough, balanced by bytes
    for k in (2, 3, len(plans), 10 * len(plans)):
        groups = group_plans(plans, min_groups=k)
        assert [p for g in groups for p in g] == plans
        assert min(k, len(plans)) <= len(groups) <= min(2 * k + 1, len(plans))
    size = os.path.getsize(scan.segment_file(log_path, plans[0].base, ".log"))
    groups = group_plans(plans, 2 * size)
    assert [p for g in groups for p in g] == plans and 1 < len(groups) < len(plans)
    # a read the .dlyindex files answer has its tasks sized by them, not by the .log
    from kdelay.spark import source

    monkeypatch.setattr(source, "PARTITION_BYTES", 3 * size)
    def tasks(mode: str, cols: str, min_partitions: int = 1) -> int:
        return len(source.KdelayReader(log_path, mode, {
            "columns": cols, "minpartitions": str(min_partitions)}).partitions())

    assert tasks("batches", "deliver_after,record_count") < \
        tasks("batches", "deliver_after,crc_valid")
    # only a read that decodes records is split further for the cores
    monkeypatch.setattr(source, "PARTITION_BYTES", 1 << 30)
    assert tasks("records", "offset,value", 3) >= 3
    assert tasks("records", "offset,deliver_after", 3) == tasks("batches", "crc_valid", 3) == 1
    for bad in ("0", "-2", "two"):
        with pytest.raises(ValueError, match="minpartitions must be a positive integer"):
            source.KdelayReader(log_path, "records", {"minpartitions": bad})
    root = str(tmp_path / "root")
    with Topic.open(root, "t", partitions=2) as topic:
        for i in range(6):
            topic.send([Record(b"x")], key=b"%d" % i)
    tplans = scan.plan_segments(scan.discover(root)[1], scan.Bounds())
    assert [{p.part for p in g} for g in group_plans(tplans)] == [{p.part} for p in tplans]


def test_forecast_scale_helpers():
    assert pick_window(0) == "1 second"
    assert pick_window(20_000) == "1 second"
    assert pick_window(10 * 60_000) == "30 seconds"
    assert pick_window(3 * 3_600_000) == "10 minutes"
    assert pick_window(90 * 86_400_000) == "7 days"
    assert [human_ms(x) for x in (0, 45_000, 300_000, 9_000_000, 277_200_000, -60_000)] == \
        ["0s", "45s", "5m", "2h30m", "3d5h", "-1m"]


# ---------------------------------------------------------------------------- Spark




@pytest.mark.spark
@pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")
class TestReadingLess:
    def test_columns_option(self, spark, log_path):
        import kdelay.spark

        full = kdelay.spark.read_log(spark, log_path)
        two = kdelay.spark.read_log(spark, log_path, columns="offset, deliver_after")
        assert two.columns == ["offset", "deliver_after"]
        assert sorted(map(tuple, two.collect())) == \
            sorted(map(tuple, full.select("offset", "deliver_after").collect()))
        kv = spark.read.format("kdelay").option("columns", "value,key").load(log_path)
        assert kv.columns == ["value", "key"]
        assert sorted(map(tuple, kv.collect())) == \
            sorted(map(tuple, full.select("value", "key").collect()))
        with pytest.raises(Exception, match="not understood"):
            kdelay.spark.read_log(spark, log_path, columns="offset,nope").collect()

    def test_index_only_reads_equal_the_scan(self, spark, tmp_path):
        """Columns a current .dlyindex holds are read from it alone (no .log bytes); the
        rows are exactly the scan's, with a cancelled record, and with an active segment
        that grew past its persisted index (read by scanning)."""
        import json

        from kdelay.testing.faults import close_abandoned

        path = str(tmp_path / "p")
        clock = [T0]
        _write(path, clock)
        log = Log.open(path, config=LogConfig(segment_bytes=8192), clock=lambda: clock[0])
        pending = [r.offset for r in log.read(0, max_records=1000) if r.deliver_after > T0 + 60]
        assert log.cancel(pending[::5]) > 0
        log.append([Record(b"late")] * 3, deliver_after=T0 + 10)
        close_abandoned(log)  # as a crash: the active segment is past its persisted index
        for mode, cols in (
                ("records", "offset,deliver_after,cancelled,segment,position,batch_base_offset"),
                ("batches", "deliver_after,record_count,base_offset,last_offset,size,position,"
                            "segment")):
            stats = str(tmp_path / f"stats-{mode}")

            def load(use_index: str, stats_dir: str | None = None, mode=mode, cols=cols):
                r = spark.read.format("kdelay").option("mode", mode).option("columns", cols)
                if stats_dir:
                    r = r.option("statsDir", stats_dir)
                return sorted(map(tuple, r.option("useIndex", use_index).load(path).collect()))

            fast, slow = load("true", stats), load("false")
            assert fast == slow and len(fast) > 20
            modes = []
            for name in os.listdir(stats):
                with open(os.path.join(stats, name)) as f:
                    modes.append(json.load(f)["mode"])
            assert modes.count("index only") == len(modes) - 1, modes  # all but the active

    def test_read_batches(self, spark, log_path, tmp_path):
        import kdelay.spark

        df = kdelay.spark.read_batches(spark, log_path)
        assert df.columns == list(BATCH_COLUMNS)
        rows = df.collect()
        want = []
        for base in segment_bases(log_path):
            for ch in scan.SegmentReader(log_path, base).chunks():
                h = ch.batches
                want += zip([base] * len(h), h.base_offset.tolist(),
                            (h.base_offset + h.last_offset_delta).tolist(),
                            ch.positions.tolist(), h.size.tolist(), h.deliver_after.tolist(),
                            h.max_timestamp.tolist(), h.record_count.tolist(),
                            [True] * len(h), strict=True)
        assert sorted(tuple(r) for r in rows) == sorted(want)
        assert sum(r["record_count"] for r in rows) == kdelay.spark.read_log(
            spark, log_path).count()
        # a topic root adds topic and partition
        root = str(tmp_path / "root")
        with Topic.open(root, "t", partitions=2) as topic:
            for i in range(6):
                topic.send([Record(b"x")], key=b"%d" % i)
        tdf = kdelay.spark.read_batches(spark, root)
        assert tdf.columns[:2] == ["topic", "partition"]
        assert tdf.groupBy().sum("record_count").first()[0] == 6

    def test_forecast_cli_is_quiet_and_shows_pending(self, log_path, tmp_path):
        """A fresh process (its own JVM): no Spark/Java chatter on stderr, and only the
        pending records, relative to now."""
        now = time.time_ns() // 1_000_000
        path = str(tmp_path / "pending")
        with Log.open(path) as log:
            log.append([Record(b"due")])  # due now: not in the forecast
            log.append([Record(b"a")] * 3, deliver_after=now + 90_000)
            log.append([Record(b"b")] * 2, deliver_after=now + 600_000)
        env = dict(os.environ, PYTHONPATH=os.getcwd())
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        res = subprocess.run([sys.executable, "-m", "kdelay", "forecast", path],
                             capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stderr == ""
        out = res.stdout.splitlines()
        assert "5 pending records" in out[0] and "per 30 seconds" in out[0]
        counts = [int(line.split()[4]) for line in out[1:]]
        assert counts == [3, 2]
        # relative to the CLI's now, which is some seconds later than the test's (its JVM
        # takes a while to start): each window starts at most as far ahead as its records
        def seconds(label: str) -> int:
            found = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", label)
            assert found and label, label
            return int(found.group(1) or 0) * 60 + int(found.group(2) or 0)
        assert 0 <= seconds(out[1].split()[1]) <= 90
        assert 90 <= seconds(out[2].split()[1]) <= 600
