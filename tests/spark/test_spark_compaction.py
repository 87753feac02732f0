"""The Spark reader and Spark verify on compacted segments: gaps are fine where compaction
made them (the marker says so), damage anywhere else."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import skip_module_without_spark_libraries

skip_module_without_spark_libraries()

from kdelay import Log, LogConfig, Record  # noqa: E402

T0 = 1_700_000_000_000
HOUR = 3_600_000


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sc") / "p")
    clock = [T0]
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=128, retention_ms=HOUR)
    with Log.open(path, config=cfg, clock=lambda: clock[0]) as log:
        for i in range(40):
            log.append([Record(b"v%d-%d" % (i, k) * 3) for k in range(4)],
                       deliver_after=T0 + (30 * 24 * HOUR if i % 5 == 0 else 0))
        clock[0] = T0 + 2 * HOUR
        assert log.compact().segments_rewritten >= 3
        expected = sorted((r.offset, r.value) for r in log.read(0, max_records=10_000))
    return path, expected


@pytest.mark.spark
def test_reader_and_verify_on_compacted_log(spark, compacted, tmp_path):
    import kdelay.spark

    path, expected = compacted
    rows = kdelay.spark.read_log(spark, path).select("offset", "value").collect()
    assert sorted((r["offset"], bytes(r["value"])) for r in rows) == expected
    report = kdelay.spark.verify(spark, path)
    assert report.ok, str(report)
    # the same gaps without the marker that explains them are damage
    copy = str(tmp_path / "p")
    shutil.copytree(path, copy)
    for name in os.listdir(copy):
        if name.endswith(".compacted"):
            os.unlink(os.path.join(copy, name))
    report = kdelay.spark.verify(spark, copy)
    assert not report.ok and report.counts["offset_errors"] > 0, str(report)
