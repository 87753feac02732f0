"""The Spark batch readers (read_log, read_batches) and Spark verify beside a compaction
and a live writer (issue 26, the sweep of point 6).

First at the data source's own level, without a JVM: the read is planned (the driver's
listing), compaction swaps segments in, then the planned partitions are read. A segment
rewritten in place reads as it is now; one merged away, or one that took in the segment
planned after it, fails with LogChangedError (a KdelayError) rather than losing or
repeating rows, and in mode batches with `error` (what verify reads) becomes an error row.
Planning waits out a swap in progress. Then with Spark: the three readers while a writer
process appends and rolls, and while it also compacts every 50 ms.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import have_spark, skip_module_without_spark_libraries

from kdelay import Log, LogConfig, Record
from kdelay.testing.processes import started

skip_module_without_spark_libraries()

from kdelay.spark import scan  # noqa: E402
from kdelay.spark.source import KdelayDataSource  # noqa: E402

T0 = 1_700_000_000_000
HOUR = 3_600_000


def _build(path: str, *, merge: bool) -> Log:
    """Sealed segments holding mostly cancelled records (with `merge`: so much that
    compaction merges neighbours), compaction not yet run."""
    segment_bytes, pad = (6000, 50) if merge else (2000, 1)
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=128,
                    compaction_min_ratio=0.1)
    log = Log.open(path, config=cfg, clock=lambda: T0)
    later = []
    for i in range(40):
        log.append([Record(b"d%d-%d" % (i, k) * 5) for k in range(3)], deliver_after=T0 + i)
        later.append(log.append([Record(b"p%d" % i * 20 * pad)],
                                deliver_after=T0 + HOUR).base_offset)
    log.cancel(later[:-3])
    return log


def _read(path: str, compact=None, **options) -> list:
    """Plan a read of `path`, call `compact()`, then read every planned partition: per
    partition, its rows or the exception it raised."""
    reader = KdelayDataSource({"path": path, "minPartitions": "64", **options}).reader(None)
    parts = reader.partitions()
    if compact is not None:
        assert compact().segments_rewritten >= 2
    out = []
    for part in parts:
        try:
            out.append([r for rb in reader.read(part) for r in rb.to_pylist()])
        except Exception as e:  # noqa: BLE001 - what each partition gives is the point
            out.append(e)
    return out


def _records(log: Log) -> set[tuple[int, bytes]]:
    return {(r.offset, r.value) for r in log.read(0, max_records=1 << 20)}


@pytest.mark.parametrize("mode", ["records", "batches"])
def test_rewritten_in_place_reads_as_it_is_now(tmp_path, mode: str) -> None:
    path = str(tmp_path / "p")
    with _build(path, merge=False) as log:
        before = log.segments
        got = _read(path, log.compact, mode=mode)
        assert log.segments == before  # in place
        assert not [p for p in got if isinstance(p, Exception)]
        rows = [r for p in got for r in p]
        if mode == "records":
            assert {(r["offset"], r["value"]) for r in rows} == _records(log)
            assert len(rows) == len(_records(log))
        else:
            covered = [o for r in rows for o in range(r["base_offset"], r["last_offset"] + 1)]
            assert sorted(covered) == sorted(o for o, _ in _records(log))


def test_merged_segments_fail_the_read_clearly(tmp_path) -> None:
    from kdelay import KdelayError

    path = str(tmp_path / "p")
    with _build(path, merge=True) as log:
        before = log.segments
        got = _read(path, log.compact, columns="offset,value")
        assert len(got) == len(before) and len(log.segments) < len(before)
        errors = [p for p in got if isinstance(p, Exception)]
        assert errors and all(isinstance(e, scan.LogChangedError) and
                              isinstance(e, KdelayError) and "read it again" in str(e)
                              for e in errors)
        assert any("took in the segment" in str(e) for e in errors)  # the one merged into
        assert any("was deleted" in str(e) for e in errors)  # the ones merged away
        rows = [(r["offset"], r["value"]) for p in got if not isinstance(p, Exception)
                for r in p]
        assert len(rows) == len(set(rows)) and set(rows) <= _records(log)


def test_verify_reads_a_changed_segment_as_an_error_row(tmp_path) -> None:
    path = str(tmp_path / "p")
    with _build(path, merge=True) as log:
        got = _read(path, log.compact, mode="batches", columns="segment,base_offset,error")
    assert not [p for p in got if isinstance(p, Exception)]
    errors = [r for p in got for r in p if r["error"] is not None]
    assert errors and all("read it again" in r["error"] for r in errors)


def test_planning_waits_out_a_swap_in_progress(tmp_path, monkeypatch) -> None:
    """Planned mid-swap, a merged-away segment is already gone and the one that takes it
    in not yet in place: planning waits for the swap, then lists the new segments."""
    from kdelay import fsio

    path = str(tmp_path / "p")
    planned: list = []
    rename = fsio.rename

    def hooked(src: str, dst: str) -> None:
        if src.endswith(".log.swap") and not planned:
            t = threading.Thread(target=lambda: planned.append(
                [p.base for p in scan.plan_segments([scan.PartitionDir(path)], scan.Bounds())]))
            t.start()
            time.sleep(0.3)
            planned.append(t)
        rename(src, dst)

    with _build(path, merge=True) as log:
        before = log.segments
        monkeypatch.setattr(fsio, "rename", hooked)
        assert log.compact().segments_rewritten >= 2
        monkeypatch.undo()
        planned[0].join(30)
        assert planned[1] == log.segments != before


# ---------------------------------------------------------------------------- Spark


@pytest.mark.spark
@pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")
@pytest.mark.parametrize("compacting", [False, True], ids=["appending", "compacting"])
def test_spark_readers_beside_a_writer_process(spark, tmp_path, compacting: bool) -> None:
    """read_log, read_batches and verify, over and over, while a writer process appends
    and rolls (and cancels and compacts every 50 ms): verify says OK every time; every row
    is read whole (CRC valid), no record twice, each as the log holds it; beside the
    compactions a read may instead fail with LogChangedError, and nothing else."""
    import kdelay.spark

    path = str(tmp_path / "w")
    seen: dict[int, bytes] = {}
    problems: list[str] = []
    rounds = changed = 0
    with started("kdelay.testing.live_writer", path, "6", "9",
                 *(["compact"] if compacting else []), ready="open") as writer:
        time.sleep(0.5)
        while writer.poll() is None or rounds < 2:
            rounds += 1
            report = kdelay.spark.verify(spark, path)
            if not report.ok:
                problems.append(str(report))
            try:
                rows = kdelay.spark.read_log(spark, path, columns="offset,value,crc_valid"
                                             ).collect()
                batches = kdelay.spark.read_batches(spark, path).collect()
            except Exception as e:  # noqa: BLE001 - a Spark job failure wraps the cause
                if not (compacting and "LogChangedError" in str(e)):
                    raise
                changed += 1
                continue
            offsets = [r["offset"] for r in rows]
            if len(offsets) != len(set(offsets)) or not all(r["crc_valid"] for r in rows):
                problems.append(f"round {rounds}: a record twice, or a CRC failure")
            bases = [b["base_offset"] for b in batches]
            if len(bases) != len(set(bases)) or not all(b["crc_valid"] for b in batches):
                problems.append(f"round {rounds}: a batch twice, or a CRC failure")
            for r in rows:
                if seen.setdefault(r["offset"], bytes(r["value"])) != bytes(r["value"]):
                    problems.append(f"offset {r['offset']} read with two values")
        writer.communicate(timeout=60)
    assert writer.returncode == 0 and not problems, problems[:3]
    assert rounds >= 2 and changed < rounds
    with Log.open(path) as log:
        final = {r.offset: r.value for r in log.read(0, max_records=1 << 30)}
    # what was read is what the log holds (compaction removed only cancelled records)
    kept = {o: v for o, v in seen.items() if o in final}
    assert kept == {o: final[o] for o in kept} and len(kept) > 100
    if not compacting:
        assert len(kept) == len(seen)


@pytest.mark.spark
@pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")
def test_spark_verify_beside_a_stalled_append(spark, tmp_path) -> None:
    """A writer stalled in the middle of its pwrite (kdelay.testing.stalled_writer): the
    short batch it left is an append in progress, a warning; once it is killed -9, the
    same bytes are damage."""
    import kdelay.spark

    path = str(tmp_path / "s")
    with started("kdelay.testing.stalled_writer", path, ready="stalled") as writer:
        report = kdelay.spark.verify(spark, path)
        assert report.ok, str(report)
        assert [w.message for w in report.warnings if "append is in progress" in w.message]
        writer.kill()
        writer.wait()
        report = kdelay.spark.verify(spark, path)
        assert not report.ok and report.counts["framing_errors"] == 1, str(report)
