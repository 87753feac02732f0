"""Cancellations in the Spark reader (a `cancelled` column) and in `kdelay.spark.verify`."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import have_spark, skip_module_without_spark_libraries

skip_module_without_spark_libraries()

from kdelay import Log, LogConfig, Record  # noqa: E402
from kdelay.log.cancellation.journal import CANCEL, encode_entry  # noqa: E402
from kdelay.spark import columnar  # noqa: E402

T0 = 1_700_000_000_000


def test_is_cancelled_column():
    cancelled = np.array([3, 7, 9], dtype=np.int64)
    offs = np.arange(2, 11, dtype=np.int64)
    assert columnar.is_cancelled(offs, cancelled).tolist() == [o in (3, 7, 9) for o in offs]
    assert not columnar.is_cancelled(offs, None).any()


@pytest.fixture
def cancelled_log(tmp_path) -> tuple[str, set[int]]:
    path = os.fspath(tmp_path / "log")
    log = Log.open(path, config=LogConfig(segment_bytes=600), clock=lambda: T0)
    for i in range(30):
        log.append([Record(b"v%d-%d" % (i, k)) for k in range(3)], deliver_after=T0 + 10 + i)
    cancelled = set(range(0, 90, 7))
    assert log.cancel(cancelled) == len(cancelled)
    log.reschedule(50, T0 + 5)
    cancelled.add(50)
    log.close()
    return path, cancelled


@pytest.mark.spark
@pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")
def test_reader_marks_cancelled_and_verify_checks_them(spark, cancelled_log):  # noqa: F811
    import kdelay.spark

    path, cancelled = cancelled_log
    rows = kdelay.spark.read_log(spark, path).select("offset", "cancelled").collect()
    assert {r["offset"] for r in rows if r["cancelled"]} == cancelled
    assert len(rows) == 91  # the reschedule's copy is a record of its own
    report = kdelay.spark.verify(spark, path)
    assert report.ok and report.counts["cancelled_records"] == len(cancelled)
    journal = os.path.join(path, f"{0:020d}.cancels")
    size = os.path.getsize(journal)
    with open(journal, "ab") as f:
        f.write(encode_entry(CANCEL, 10 ** 6))  # names an offset outside its segment
    report = kdelay.spark.verify(spark, path)
    assert not report.ok
    bad = [p for p in report.problems if p.kind == "cancellation"]
    assert [(p.file, p.position) for p in bad] == [(journal, size)]
