"""The streaming source of due records: the append horizon, the live catalog, and
Structured Streaming queries against a log another process is appending to."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest
from conftest import have_spark, skip_module_without_spark_libraries

from kdelay import CorruptLogError, Log, LogConfig, Record
from kdelay.log.segments import append_horizon
from kdelay.log.segments.layout import segment_file
from kdelay.testing.processes import started

skip_module_without_spark_libraries()

from kdelay.spark import scan  # noqa: E402
from kdelay.spark.live import LivePartition  # noqa: E402

T0 = 1_700_000_000_000


def _wall() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------- no Spark


def test_kill_9_writer_mid_stream(tmp_path):
    """kill -9 of a writer while a lock-free reader follows it: the dead writer's horizon
    counts as no writer, and everything the reader catalogued survives recovery."""
    import signal

    path = str(tmp_path / "p")
    live = LivePartition(scan.PartitionDir(path))
    writer = subprocess.Popen([sys.executable, "-m", "kdelay.testing.live_writer", path, "60",
                               "3"], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=os.getcwd()))
    try:
        assert writer.stdout.readline().startswith("open")
        deadline = time.monotonic() + 30
        while len(live.batches) < 200 and time.monotonic() < deadline:
            live.refresh(_wall())
            time.sleep(0.01)
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.wait()
    assert len(live.batches) >= 200
    assert append_horizon.read_state(path) is None
    live.refresh(_wall())
    seen = {(b[0], b[1], b[2]) for b in live.batches}
    with Log.open(path) as log:
        recovered = {(r.deliver_after, r.offset) for r in log.read(0, max_records=1 << 30)}
    assert all((da, off) in recovered for da, base, last in seen
               for off in range(base, last + 1))


def test_live_catalog_never_passes_an_append_in_flight(tmp_path):
    """The race, made deterministic: a reader plans while an append has chosen its
    deliverAfter (the log clock is read inside the append) but not yet written it. Batch B,
    already visible and due, has a later deliverAfter than the one in flight; a reader
    without the horizon would hand out B and then never the in-flight batch."""
    path = str(tmp_path / "p")
    live = LivePartition(scan.PartitionDir(path))
    seen: list[tuple[int, int]] = []
    t = {"now": T0}

    def clock() -> int:
        if t.get("race"):
            t["race"] = False
            bound = live.refresh(T0 + 10)  # the reader plans now, at wall time T0 + 10
            seen.append(live.latest(bound, (-1, -1)))
        return t["now"]

    with Log.open(path, clock=clock) as log:
        a = log.append([Record(b"a")])
        b = log.append([Record(b"b")], deliver_after=T0 + 8)
        t["now"] = T0 + 5
        t["race"] = True
        c = log.append([Record(b"c")])  # deliverAfter T0 + 5, planned-against mid-append
        assert c.deliver_after == T0 + 5
        # the horizon held the bound below the log clock's floor when the append began
        # (T0): the reader handed out nothing, in particular not B
        assert seen == [(-1, -1)]
        end = live.latest(live.refresh(T0 + 10), seen[0])
        got = [(x[0], x[1]) for x in live.between(seen[0], end)]
        assert got == [(a.deliver_after, a.base_offset), (c.deliver_after, c.base_offset),
                       (b.deliver_after, b.base_offset)]


def test_live_catalog_follows_rolls_and_sealed_indexes(tmp_path):
    path = str(tmp_path / "p")
    clock = [T0]
    live = LivePartition(scan.PartitionDir(path))
    want = []
    with Log.open(path, config=LogConfig(segment_bytes=4096), clock=lambda: clock[0]) as log:
        for i in range(300):
            clock[0] += 1
            r = log.append([Record(b"x" * 50) for _ in range(3)],
                           deliver_after=T0 + (i * 37) % 200)
            want.append((r.deliver_after, r.base_offset, r.last_offset))
            if i % 50 == 0:
                live.refresh(clock[0])
        assert len(log.segments) > 5
    bound = live.refresh(T0 + 10_000)
    assert sorted(want) == [tuple(b[:3]) for b in live.between((-1, -1),
                                                                live.latest(bound, (-1, -1)))]
    # a fresh catalog of the closed log reads sealed segments from their .dlyindex
    fresh = LivePartition(scan.PartitionDir(path), floor=(T0 + 100, 1 << 62))
    fresh.refresh(T0 + 10_000)
    assert [tuple(b[:3]) for b in fresh.batches] == [w for w in sorted(want)
                                                      if w[0] > T0 + 100]


def test_live_catalog_follows_rewritten_and_deleted_segments(tmp_path):
    """A sealed segment replaced in place (as compaction swaps one in) is catalogued
    afresh; a deleted one (retention) leaves the catalogue."""
    import shutil

    path = str(tmp_path / "p")
    with Log.open(path, config=LogConfig(segment_bytes=2048), clock=lambda: T0) as log:
        for _ in range(60):
            log.append([Record(b"z" * 100)])
        bases = log.segments
    live = LivePartition(scan.PartitionDir(path))
    live.refresh(T0 + 1)
    before = list(live.batches)
    victim = segment_file(path, bases[1], ".log")
    shutil.copy(victim, victim + ".new")
    os.replace(victim + ".new", victim)  # same bytes, new inode
    live.refresh(T0 + 1)
    assert list(live.batches) == before
    for suffix in (".log", ".index", ".timeindex", ".dlyindex"):
        os.remove(segment_file(path, bases[0], suffix))
    live.refresh(T0 + 1)
    assert list(live.batches) == [b for b in before if b[3] != bases[0]]


def _reuse_inode(path: str, held: str) -> None:
    """Put the bytes of the file at `path` into the older file `held` (a hard link that kept
    an inode alive) and rename it over `path`: the segment is now its rewritten bytes
    under the inode number it had before, as when the filesystem hands a freed inode to
    the next file made (ext4 does within milliseconds: issue 31, point 13)."""
    with open(path, "rb") as f:
        data = f.read()
    with open(held, "r+b") as f:
        f.truncate(0)
        f.write(data)
    os.replace(held, path)


def test_live_catalog_knows_a_rewrite_under_a_reused_inode(tmp_path):
    """A sealed segment catalogued whole, and the segment being appended to catalogued up
    to its end, are then compacted (cancelled records removed, batches moved) and come
    back under the inode numbers catalogued. The catalogue takes both afresh: it agrees
    with one built from nothing, and with the log. (The inode alone used to identify a
    segment: the first kept stale batches, the second walked on from its old end into
    other bytes, which stalled the stream or failed it as damage.)"""
    path = str(tmp_path / "p")
    clock = [T0]
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=128, compaction_min_ratio=0.01)
    later = T0 + 3_600_000
    with Log.open(path, config=cfg, clock=lambda: clock[0]) as log:
        for i in range(30):
            log.append([Record(b"v%d-%d" % (i, k) * 3) for k in range(3)],
                       deliver_after=later if i % 3 == 0 else T0)
        live = LivePartition(scan.PartitionDir(path))
        live.refresh(T0 + 1)  # the last segment catalogued while it is appended to
        sealed, active = log.segments[0], log.segments[-1]
        for _ in range(12):  # seal it
            log.append([Record(b"w" * 60)])
        assert log.segments[-1] != active
        held = {}
        for base in (sealed, active):
            held[base] = str(tmp_path / f"held-{base}")
            os.link(segment_file(path, base, ".log"), held[base])
        pending = [r.offset for r in log.read(0, max_records=10_000)
                   if r.deliver_after == later and r.offset >= sealed]
        assert log.cancel(pending) == len(pending)
        assert log.compact().segments_rewritten >= 2
        want = sorted((r.deliver_after, r.offset) for r in log.read(0, max_records=10_000)
                      if r.deliver_after <= T0 + 1)
    for base in (sealed, active):
        log_path = segment_file(path, base, ".log")
        assert os.stat(log_path).st_ino != os.stat(held[base]).st_ino
        _reuse_inode(log_path, held[base])
    live.refresh(T0 + 1)
    fresh = LivePartition(scan.PartitionDir(path))
    fresh.refresh(T0 + 1)
    assert list(live.batches) == list(fresh.batches)
    assert live.damaged() is None
    got = sorted((b[0], off) for b in live.batches for off in range(b[1], b[2] + 1)
                 if b[0] <= T0 + 1)
    assert got == want


def test_live_catalog_raises_on_damage_in_a_sealed_segment_without_a_writer(tmp_path):
    """A sealed segment that stays damaged is reported even when no writer is alive (the
    catalogue used to wait for one that never came: the stream stalled silently)."""
    path = str(tmp_path / "p")
    with Log.open(path, config=LogConfig(segment_bytes=1024), clock=lambda: T0) as log:
        for _ in range(30):
            log.append([Record(b"q" * 40)])
        bases = log.segments
    assert len(bases) > 2
    os.remove(segment_file(path, bases[0], ".dlyindex"))  # walked, not listed from its index
    with open(segment_file(path, bases[0], ".log"), "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    live = LivePartition(scan.PartitionDir(path))
    live.refresh(T0 + 1)  # a first sighting may be a file replaced under the walk
    with pytest.raises(CorruptLogError, match="damaged"):
        live.refresh(T0 + 1)


def test_live_catalog_across_a_compaction(tmp_path):
    """Segments compacted under a reader (records long due are dropped, offsets get gaps):
    the catalogue it keeps and one built afresh agree with the log's own index, and the
    far-future records survive in both."""
    hour = 3_600_000
    path = str(tmp_path / "p")
    clock = [T0]
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=128, retention_ms=hour)
    live = LivePartition(scan.PartitionDir(path))
    with Log.open(path, config=cfg, clock=lambda: clock[0]) as log:
        for i in range(40):
            log.append([Record(b"v%d-%d" % (i, k) * 3) for k in range(4)],
                       deliver_after=T0 + (30 * 24 * hour if i % 5 == 0 else 0))
        live.refresh(T0)
        clock[0] = T0 + 2 * hour
        assert log.compact().segments_rewritten >= 3
        log.append([Record(b"after")])
        want = sorted((r.deliver_after, r.offset) for r in log.read(0, max_records=10_000))
    live.refresh(T0 + 2 * hour + 10)
    fresh = LivePartition(scan.PartitionDir(path))
    fresh.refresh(T0 + 2 * hour + 10)
    for cat in (live, fresh):
        got = sorted((b[0], off) for b in cat.batches for off in range(b[1], b[2] + 1))
        assert got == want
    assert sum(1 for da, _ in want if da > T0 + 2 * hour) == 8 * 4


def test_live_catalog_allows_an_offset_gap_only_where_compaction_made_one(tmp_path):
    """The engine's rule (offset_continuity): a batch may skip offsets only in a segment
    compaction rewrote. In a sealed segment without a compaction marker a gap is damage:
    the batches from it on are not catalogued (the catalogue used to take a gap in any
    sealed segment)."""
    from kdelay.log.batch import walker
    from kdelay.log.compaction import swap
    from kdelay.log.segments.layout import MARKER_SUFFIX

    path = str(tmp_path / "p")
    with Log.open(path, config=LogConfig(segment_bytes=1024), clock=lambda: T0) as log:
        for i in range(40):
            log.append([Record(b"w" * 40)], deliver_after=T0 + i)
        bases = log.segments
    assert len(bases) > 2
    os.remove(segment_file(path, bases[0], ".dlyindex"))  # walked, not listed from its index
    log_path = segment_file(path, bases[0], ".log")
    fd = os.open(log_path, os.O_RDWR)
    try:
        heads = list(walker.iter_headers(fd, log_path, 0, os.fstat(fd).st_size))
        pos, h = heads[-1]  # its base offset moved on by 3: the batch CRC does not cover it
        os.pwrite(fd, (h.base_offset + 3).to_bytes(8, "big"), pos)
    finally:
        os.close(fd)
    live = LivePartition(scan.PartitionDir(path))
    live.refresh(T0 + 1000)
    first = sorted(b[1] for b in live.batches if b[3] == bases[0])
    assert first == [h.base_offset for _, h in heads[:-1]]
    # with compaction's marker the segment may skip offsets: the same batch is taken
    with open(segment_file(path, bases[0], MARKER_SUFFIX), "wb") as f:
        f.write(swap.encode_marker(swap.Marker(bases[0], bases[1])))
    live.refresh(T0 + 1000)
    assert sorted(b[1] for b in live.batches if b[3] == bases[0]) == \
        first + [heads[-1][1].base_offset + 3]


def test_stream_read_leaves_out_cancelled_records(tmp_path):
    from kdelay.spark.stream import read_range

    path = str(tmp_path / "p")
    with Log.open(path, clock=lambda: T0) as log:
        log.append([Record(b"r%d" % i) for i in range(5)], deliver_after=T0 + 1000)
        log.append([Record(b"s")], deliver_after=T0 + 2000)
        assert log.cancel([1, 3, 5]) == 3
    live = LivePartition(scan.PartitionDir(path))
    end = live.latest(live.refresh(T0 + 5000), (-1, -1))
    rows = [r for rb in read_range(live.part, (-1, -1), end, live.between((-1, -1), end))
            for r in rb.to_pylist()]
    assert [(r["offset"], r["value"], r["cancelled"]) for r in rows] == [
        (0, b"r0", False), (2, b"r2", False), (4, b"r4", False)]
    with Log.open(path, clock=lambda: T0 + 5000) as log:  # the engine agrees
        assert [r.offset for r in log.fetch(None, max_records=100).records] == [0, 2, 4]


def test_live_catalog_waits_for_a_torn_tail_and_flags_damage(tmp_path):
    path = str(tmp_path / "p")
    with Log.open(path, clock=lambda: T0) as log:
        for _ in range(3):
            log.append([Record(b"y" * 40)])
    seg = segment_file(path, 0, ".log")
    size = os.path.getsize(seg)
    with open(seg, "rb") as f:
        first = f.read(size // 3)
    with open(seg, "ab") as f:  # half a batch: as if still being written
        f.write(first[: len(first) // 2])
    live = LivePartition(scan.PartitionDir(path))
    for _ in range(3):  # no live writer: wait quietly
        live.refresh(T0 + 1)
    assert len(live.batches) == 3
    # damage under a live, idle writer: the first sighting may be an append in flight,
    # the second is an error, not a stall
    with Log.open(path, clock=lambda: T0) as log:  # recovery truncates the torn tail
        assert log.log_end_offset == 3
        log.append([Record(b"z" * 40)])
        with open(seg, "r+b") as f:
            f.seek(size + 80)
            f.write(b"\xff")
        live2 = LivePartition(scan.PartitionDir(path))
        live2.refresh(T0 + 1)
        assert len(live2.batches) == 3
        with pytest.raises(CorruptLogError, match="damaged"):
            live2.refresh(T0 + 1)


# ---------------------------------------------------------------------------- Spark


def _collector(sink: list):
    def each(df, batch_id):
        rows = [(r["offset"], r["deliver_after"]) for r in
                df.select("offset", "deliver_after").collect()]
        sink.append((batch_id, _wall(), rows))
    return each


def _wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _engine_keys(path: str) -> list[tuple[int, int]]:
    with Log.open(path) as log:
        out, off = [], 0
        while True:
            got = log.read(off, max_records=10_000)
            if not got:
                return out
            out.extend((r.offset, r.deliver_after) for r in got)
            off = got[-1].offset + 1


@contextlib.contextmanager
def _streaming(spark, tmp_path):
    """(log directory, micro-batches so far) of a query running on a log with one record
    (already out), triggered every 100 ms; stopped on leaving."""
    path = str(tmp_path / "live")
    with Log.open(path) as log:
        log.append([Record(b"first")])
    sink: list = []
    q = (spark.readStream.format("kdelay").load(path).writeStream
         .foreachBatch(_collector(sink)).trigger(processingTime="100 milliseconds")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        assert _wait(lambda: sink, 120)  # the query runs: now race it
        yield path, sink
        time.sleep(0.5)  # a straggling duplicate would show up in the next batches
    finally:
        q.stop()
    assert q.exception() is None


def _write(path: str, *args: str) -> str:
    """Run kdelay.testing.live_writer on `path` to its end; its output after `open`."""
    with started("kdelay.testing.live_writer", path, *args, ready="open") as writer:
        out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, out + err
    return out


def _in_key_order(sink: list) -> None:
    """Each micro-batch in (deliver_after, offset) order, and after the one before."""
    prev = (-1, -1)
    for _, _, rows in sink:
        ordered = [(da, off) for off, da in rows]
        assert ordered == sorted(ordered)
        if ordered:
            assert ordered[0] > prev
            prev = ordered[-1]


@pytest.mark.spark
@pytest.mark.skipif(not have_spark(), reason="pyspark or Java not available")
class TestStream:
    def test_stream_races_a_writing_process(self, spark, tmp_path, capsys):
        """A writer process appends for a few seconds (most batches due at their append
        time) while a query streams due records: every record arrives exactly once, in
        (deliver_after, offset) order, never before it is due."""
        with _streaming(spark, tmp_path) as (path, sink):
            total = int(_write(path, "6", "7").split("done ")[1])
            assert total > 500
            assert _wait(lambda: sum(len(r) for _, _, r in sink) >= total, 90)
        keys = _engine_keys(path)
        got = [row for _, _, rows in sink for row in rows]
        assert sorted(got) == sorted(keys)  # exactly once
        _in_key_order(sink)
        assert all(da <= seen_at for _, seen_at, rows in sink for _, da in rows)  # never early
        assert len(sink) > 5  # the writer really raced many micro-batches
        lat = sorted(seen_at - da for _, seen_at, rows in sink[1:] for _, da in rows)
        with capsys.disabled():
            print(f"\n  stream: {len(got)} records in {len(sink)} micro-batches; latency "
                  f"due->out p50 {lat[len(lat) // 2]} ms, p99 {lat[len(lat) * 99 // 100]} ms, "
                  f"max {lat[-1]} ms")

    def test_stream_races_a_compacting_writer(self, spark, tmp_path):
        """The writer process also cancels records and compacts every 50 ms, rewriting
        sealed segments between the planning and the reading of micro-batches: the query
        neither dies nor skips nor repeats a record (issue 26, point 6)."""
        with _streaming(spark, tmp_path) as (path, sink):
            out = _write(path, "5", "11", "compact")
            assert int(out.split("compacted ")[1].split()[0]) >= 10
            with Log.open(path) as log:  # wait for the last record to come due, however
                # late the writer's last append was: no margin a loaded machine can break
                last_due = max(r.deliver_after for r in log.read(0, max_records=1 << 20))
                assert _wait(lambda: log.now() > last_due, 30)
                # every record the engine holds, uncancelled: all due now
                want = [(r.offset, r.deliver_after) for r in
                        log.fetch(None, max_records=1 << 20, max_bytes=1 << 30).records]
            assert _wait(lambda: sum(len(r) for _, _, r in sink) >= len(want), 90)
        got = [row for _, _, rows in sink for row in rows]
        assert sorted(got) == sorted(want) and len(got) == len(set(got))  # exactly once
        _in_key_order(sink)

    def test_restart_from_checkpoint(self, spark, tmp_path):
        """Stop a query, append more (some due later), restart it from its checkpoint:
        nothing repeats, nothing is skipped; records not yet due wait for their time."""
        root = str(tmp_path / "topic")
        from kdelay import Topic

        now = _wall()
        with Topic.open(root, "t", partitions=2) as topic:
            for i in range(40):
                topic.send([Record(b"a%d" % i, key=b"%d" % i)], deliver_after=now - 1000)
            late = now + 4000
            topic.send([Record(b"later", key=b"x")], deliver_after=late)
        ck = str(tmp_path / "ck")

        def run() -> list:
            sink: list = []
            q = (spark.readStream.format("kdelay").load(root).writeStream
                 .foreachBatch(lambda df, i: sink.append(
                     [(r["partition"], r["offset"]) for r in df.collect()]))
                 .option("checkpointLocation", ck).start())
            try:
                q.processAllAvailable()
            finally:
                q.stop()
            return [x for rows in sink for x in rows]

        first = run()
        first_done = _wall()
        with Topic.open(root, "t") as topic:
            for i in range(10):
                topic.send([Record(b"b%d" % i, key=b"%d" % i)])
        second = run()
        assert _wait(lambda: _wall() > late, 30)
        third = run()
        assert run() == []
        runs = [first, second, third]
        everything = [x for r in runs for x in r]
        assert len(everything) == len(set(everything)) == 51  # none twice, none missing
        assert len(first) in (40, 41) and len(second) in (10, 11)
        if first_done < late:  # the late record is not handed out before it is due
            assert len(first) == 40

    def test_starting_offsets_latest(self, spark, tmp_path):
        path = str(tmp_path / "p")
        with Log.open(path) as log:
            log.append([Record(b"old")])
        sink: list = []
        q = (spark.readStream.format("kdelay").option("startingOffsets", "latest").load(path)
             .writeStream.foreachBatch(_collector(sink))
             .option("checkpointLocation", str(tmp_path / "ck")).start())
        try:
            q.processAllAvailable()
            with Log.open(path) as log:
                new = log.append([Record(b"new")])
            assert _wait(lambda: any(r for _, _, r in sink), 30)
        finally:
            q.stop()
        assert [row for _, _, rows in sink for row in rows] == [(new.base_offset,
                                                                 new.deliver_after)]
