"""The growing end of a segment (kdelay/log/segments/segment_tail.pyx): its write, made in C
while fsio.write is fsio's own and through fsio.write whenever anything has replaced it
(fault injection), and its offset/time/deliverAfter index upkeep. Both write paths must
leave the same files; the sparse indexes follow Kafka's rule; a short or failed write
leaves nothing behind."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record, fsio
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.offset_index import OffsetIndex
from kdelay.index.time_index import TimeIndex
from kdelay.log.batch import codec
from kdelay.log.segments.layout import LOG_SUFFIX
from kdelay.log.segments.segment import LogSegment
from kdelay.log.segments.segment_tail import SegmentTail
from kdelay.testing.faults import FaultInjector

T0 = 1_700_000_000_000

BATCHES = st.lists(st.tuples(st.integers(1, 12), st.integers(0, 300), st.integers(0, 5_000),
                             st.booleans()), min_size=1, max_size=40)
CONFIGS = st.builds(dict, segment_bytes=st.sampled_from([600, 2_000, 1 << 30]),
                    index_interval_bytes=st.sampled_from([1, 100, 4096]),
                    flush_messages=st.sampled_from([None, 1, 3]))


def _run(path: str, cfg: dict, batches: list) -> list:
    """Append `batches` (records, value bytes, delay, stamped) with a clock that moves 1 ms
    per batch; the results, then every segment file's bytes after a clean close."""
    now = [T0]
    results = []
    with Log.open(path, config=LogConfig(**cfg), clock=lambda: now[0]) as log:
        for i, (n, size, delay, stamped) in enumerate(batches):
            recs = [Record(bytes([i % 251]) * size, key=b"k%d" % k,
                           timestamp=T0 - k if stamped else None) for k in range(n)]
            results.append(tuple(log.append(recs, deliver_after=now[0] + delay)))
            now[0] += 1
    files = {name: pathlib.Path(path, name).read_bytes()
             for name in sorted(os.listdir(path)) if name[0].isdigit()}
    return [results, files]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(CONFIGS, BATCHES)
def test_the_c_write_and_the_fsio_write_leave_the_same_log(tmp_path_factory, monkeypatch,
                                                           cfg, batches):
    plain = _run(str(tmp_path_factory.mktemp("c")), cfg, batches)
    seen: list[str] = []
    own = fsio.write

    def through_fsio(fd: int, data: bytes, position: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        own(fd, data, position)

    with monkeypatch.context() as m:
        m.setattr(fsio, "write", through_fsio)
        seamed = _run(str(tmp_path_factory.mktemp("fsio")), cfg, batches)
    assert seamed == plain
    # every batch went through the replaced fsio.write: one write to a .log per append
    assert sum(p.endswith(LOG_SUFFIX) for p in seen) == len(batches)


def test_the_fault_injector_sees_every_append(tmp_path):
    path = str(tmp_path / "p")
    Log.open(path).close()
    with FaultInjector(roots=[path]) as inj, Log.open(path, clock=lambda: T0) as log:
        for i in range(25):
            log.append([Record(b"v%d" % i)])
        writes = [p for op, p in inj.ops if op == "write" and p.endswith(LOG_SUFFIX)]
    assert len(writes) == 25


def _sparse_model(batches: list[tuple[int, int]], interval: int):
    """Kafka's sparse offset and time index rule, as the Python write path stated it:
    (offset entries, time entries, max timestamp) for batches of (size, max timestamp) with
    base offsets 0, 1, 2, ..."""
    since, offsets, times, max_ts, pos = 0, [], [], -1, 0
    for base, (size, ts) in enumerate(batches):
        if since >= interval:
            offsets.append((base, pos))
            if ts > max_ts:
                times.append((ts, base))
            since = 0
        since += size
        max_ts = max(max_ts, ts)
        pos += size
    return offsets, times, max_ts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 50)), min_size=1, max_size=60),
       st.sampled_from([1, 64, 256, 4096]))
def test_index_upkeep_follows_the_sparse_rule(tmp_path_factory, batches, interval):
    seg = LogSegment.create(str(tmp_path_factory.mktemp("s")), 0)
    try:
        for base, (size, ts) in enumerate(batches):
            assert seg.tail.append(bytes(size), base, 0, T0 + ts, T0 + ts, interval) == sum(
                s for s, _ in batches[:base])
        offsets, times, max_ts = _sparse_model([(s, T0 + t) for s, t in batches], interval)
        assert _entries(seg.offset_index) == offsets
        assert _entries(seg.time_index) == times
        assert seg.max_timestamp == max_ts and seg.tail.first_timestamp == T0 + batches[0][1]
        assert seg.size == sum(s for s, _ in batches) and seg.next_offset == len(batches)
        starts = [sum(s for s, _ in batches[:i]) for i in range(len(batches))]
        assert _entries(seg.dly_index) == sorted(
            (T0 + t, base, pos, 0, s) for base, ((s, t), pos) in enumerate(
                zip(batches, starts, strict=True)))
    finally:
        seg.close()


def _entries(index) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in e) for e in zip(*index.columns(), strict=True)]


SHORT_WRITE = textwrap.dedent("""
    import errno, os, resource, signal, sys
    from kdelay import Log, LogWriteError, Record
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: short, then EFBIG
    path = sys.argv[1]
    log = Log.open(path, clock=lambda: 1_700_000_000_000)
    log.append([Record(b"a" * 100)])
    seg = log._segments.active
    size = seg.size
    for room in (40, 0):  # a short write the C pwrite makes, then one that fails outright
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + room, resource.RLIM_INFINITY))
        try:
            log.append([Record(b"b" * 100)])
        except LogWriteError as e:
            assert e.errno == errno.EFBIG, e
        else:
            raise AssertionError("the append past the file size limit was not refused")
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        assert seg.size == size == os.fstat(seg.fd).st_size  # nothing left behind
    res = log.append([Record(b"c" * 100)])
    assert res.base_offset == 1 and [r.value for r in log.read(0)] == [b"a" * 100, b"c" * 100]
    log.close()
    print("ok")
""")


def test_a_short_or_failed_write_is_refused_and_cut_off(tmp_path):
    out = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(tmp_path / "p")],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_tail_stands_alone_and_reads_its_first_timestamp_itself(tmp_path):
    """A SegmentTail needs no segment around it: over a .log written before (its first
    batch's timestamp not kept), the segment_ms rule reads the first header itself; the
    LogSegment that owns one reads and sets its end through it."""
    seg = LogSegment.create(str(tmp_path), 0)
    for base, ts in enumerate((T0, T0 + 500)):
        seg.tail.append(bytes(codec.encode_batch(base_offset=base, base_timestamp=ts,
                                                 deliver_after=ts, keys=[None],
                                                 values=[b"v"])),
                        base, 0, ts, ts, 4096)
    size, fd = seg.size, os.dup(seg.fd)
    seg.close()
    tail = SegmentTail(seg.log_path, fd, size, 2, OffsetIndex(0), TimeIndex(0),
                       DeliverAfterIndex(0))
    try:
        assert tail.rolls_before(1, T0 + 999, 1 << 30, 1000) is False
        assert tail.first_timestamp == T0
        assert tail.rolls_before(1, T0 + 1000, 1 << 30, 1000) is True
    finally:
        os.close(fd)
    os.makedirs(tmp_path / "x")
    again = LogSegment.create(str(tmp_path / "x"), 5)
    try:
        again.size = 7  # (through the tail, as compaction and recovery set it)
        assert again.tail.size == 7 and again.size == 7 and again.next_offset == 5
        assert again.dly_index is again.tail.dly_index
    finally:
        again.size = 0
        again.close()


def _batch(base: int, ts: int) -> bytes:
    return bytes(codec.encode_batch(base_offset=base, base_timestamp=ts, deliver_after=ts,
                                    keys=[None], values=[b"v"]))


def test_appends_follow_an_index_that_replaced_its_recent_columns(tmp_path):
    """The tail keeps the deliverAfter index's recent columns between appends: once the
    index replaces them (a persist clears its recent entries) or is itself replaced, the
    next append's entry goes to the index's columns of the moment, never to retired ones."""
    seg = LogSegment.create(str(tmp_path), 0)
    try:
        seg.tail.append(_batch(0, T0), 0, 0, T0, T0, 4096)
        first = seg.dly_index.recent_columns
        seg.dly_index.persist(seg.path(".dlyindex"), log_bytes=seg.size, next_offset=1)
        assert first.retired and seg.dly_index.recent_columns is not first
        seg.tail.append(_batch(1, T0 + 1), 1, 0, T0 + 5, T0 + 1, 4096)
        assert len(first) == 1 and len(seg.dly_index.recent_columns) == 1
        fresh = DeliverAfterIndex(0)
        seg.dly_index = fresh  # (as a deferred load or compaction's rewrite sets it)
        seg.tail.append(_batch(2, T0 + 2), 2, 0, T0 + 9, T0 + 2, 4096)
        assert len(fresh.recent_columns) == 1
        assert fresh.recent_columns.da.raw().tolist() == [0]  # (relative to T0 + 9)
    finally:
        seg.close()


def test_appends_after_a_roll_go_to_the_new_segment(tmp_path):
    """The writer keeps the active tail between appends until a roll retires it: every
    append after a roll lands in the new active segment, and each segment's index holds
    exactly its own batches."""
    t = [T0]
    with Log.open(str(tmp_path), config=LogConfig(), clock=lambda: t[0]) as log:
        for i in range(7):
            log.append(Record(b"v%d" % i), deliver_after=T0 + 100 - i)
            if i in (2, 3):
                log.roll()
        segments = log._segments
        assert segments.active.next_offset == 7
        assert [(seg.base_offset, len(seg.dly_index)) for seg in segments] == \
            [(0, 3), (3, 1), (4, 3)]
        t[0] = T0 + 200
        got = log.fetch(max_records=10)
        assert [r.offset for r in got.records] == [6, 5, 4, 3, 2, 1, 0]
