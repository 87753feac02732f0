"""Spark reads remote-only segments (tiered storage) with the same rows as local ones: the
batch reader, read_batches, verify and the streaming source, each task fetching its own
byte ranges from the store (kdelay/spark/segment_bytes.py)."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import have_spark, skip_module_without_spark_libraries

skip_module_without_spark_libraries()

from kdelay import Log, LogConfig, Record  # noqa: E402
from kdelay.log.segments.layout import LOG_SUFFIX, REMOTE_SUFFIX, segment_file  # noqa: E402
from kdelay.log.tiered import inventory  # noqa: E402
from kdelay.spark import read_batches, read_log, verify  # noqa: E402
from kdelay.spark.segment_bytes import open_segment  # noqa: E402
from kdelay.testing.tiering import tier_out  # noqa: E402

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")]
T0 = 1_700_000_000_000


def _write(path: str) -> None:
    t = [T0]
    with Log.open(path, config=LogConfig(segment_bytes=6000), clock=lambda: t[0]) as log:
        for i in range(240):
            t[0] += 1
            recs = [Record(b"v%d-%d" % (i, j) * (1 + j % 3), key=b"k%d" % j)
                    for j in range(1 + i % 4)]
            log.append(recs, deliver_after=T0 + (i * 7919) % 100_000)
        log.cancel([log.log_end_offset - 3])  # the active segment's: stays local anyway
    # a cancellation in a segment that goes remote-only: its journal stays local
    with Log.open(path, config=LogConfig(segment_bytes=6000), clock=lambda: T0) as log:
        assert log.cancel([1]) == 1


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """(local log, the same log with its first sealed segments remote-only in a file://
    store)."""
    root = tmp_path_factory.mktemp("remote-spark")
    local = str(root / "local-0")
    _write(local)
    tiered = str(root / "tiered-0")
    shutil.copytree(local, tiered)
    cfg = LogConfig(segment_bytes=6000, remote_storage=f"file://{root}/store")
    bases = tier_out(tiered, cfg, remote_only=3)
    assert len(bases) > 3  # one copied segment keeps its local files
    return local, tiered


def _rows(df, order=("offset",)):
    return [tuple(r) for r in df.orderBy(*order).collect()]


def test_remote_only_segments_are_listed_and_read_through_the_store(logs):
    _, tiered = logs
    listed = inventory.list_all_segments(tiered)
    remote_only = [s for s in listed if s.remote_only]
    assert len(remote_only) == 3
    first = remote_only[0]
    assert not os.path.exists(segment_file(tiered, first.base_offset, LOG_SUFFIX))
    assert os.path.exists(segment_file(tiered, first.base_offset, REMOTE_SUFFIX))
    with open_segment(tiered, first.base_offset) as src:
        assert src.remote == first.remote and src.size == first.remote.size
        assert src.path.endswith(first.remote.object_name(LOG_SUFFIX))
        assert src.dly_index() is not None and src.offset_index() is not None
        head = src.read(0, 61)
        buf = bytearray(20)
        assert src.gather([0, 4], [8, 12], buf) == [8, 12]
        assert bytes(buf) == head[:8] + head[4:16]


def test_read_log_and_read_batches_give_the_same_rows(spark, logs):
    local, tiered = logs
    assert _rows(read_log(spark, tiered)) == _rows(read_log(spark, local))
    order = ("segment", "position")
    assert _rows(read_batches(spark, tiered), order) == _rows(read_batches(spark, local), order)
    # pushdown: the manifest's keys and the remote indexes pick the same rows
    cond = f"deliver_after > {T0 + 40_000} and offset < 300"
    assert _rows(read_log(spark, tiered).where(cond)) == _rows(read_log(spark, local)
                                                               .where(cond))
    cols = read_log(spark, tiered).select("offset", "deliver_after", "cancelled")
    assert _rows(cols) == _rows(read_log(spark, local).select("offset", "deliver_after",
                                                              "cancelled"))


def test_verify_checks_remote_segments(spark, logs):
    local, tiered = logs
    rep, want = verify(spark, tiered), verify(spark, local)
    assert rep.ok, str(rep)
    assert rep.counts == want.counts


def test_stream_reads_remote_segments(spark, logs, tmp_path):
    local, tiered = logs
    got = {}
    for name, path in (("local", local), ("tiered", tiered)):
        q = (spark.readStream.format("kdelay").load(path).writeStream.format("memory")
             .queryName(f"remote_{name}").option("checkpointLocation", str(tmp_path / name))
             .start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        got[name] = _rows(spark.table(f"remote_{name}").select("offset", "deliver_after",
                                                               "value"))
    assert got["tiered"] == got["local"] and got["local"]
