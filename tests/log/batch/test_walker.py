"""log/batch/walker.py, each mode on real .log files that are then damaged: strict stops at a
torn tail or a bad CRC and says where, tolerant resyncs past a garbled batch, header-only
reads only headers, and the filtered reader (Spark's) skips batches out of bounds."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record
from kdelay.log.batch import codec, walker
from kdelay.log.segments import layout
from kdelay.testing.damage import flip_byte

T0 = 1_700_000_000_000


def _build(path: str, batches: int = 12) -> tuple[str, list[tuple[int, codec.BatchHeader]]]:
    """One segment of batches of varying size and deliverAfter; returns the .log's path and
    (position, header) of every batch, from the engine's own header walk."""
    with Log.open(path, config=LogConfig(), clock=lambda: T0) as log:
        for i in range(batches):
            log.append([Record(b"x" * (20 + 37 * i), key=b"k%d" % j) for j in range(1 + i % 3)],
                       deliver_after=T0 + (i * 7919) % 5000)
    log_path = layout.segment_file(path, 0, layout.LOG_SUFFIX)
    fd = os.open(log_path, os.O_RDONLY)
    try:
        heads = list(walker.iter_headers(fd, log_path, 0, os.fstat(fd).st_size))
    finally:
        os.close(fd)
    return log_path, heads


def _flip(path: str, pos: int) -> None:
    flip_byte(path, pos, 0x5A)


def _scan(path: str, **kw) -> walker.ScanResult:
    fd = os.open(path, os.O_RDONLY)
    try:
        return walker.scan_log(fd, path, 0, **kw)
    finally:
        os.close(fd)


def _walk(path: str, **kw) -> list:
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(walker.walk(fd, 0, os.fstat(fd).st_size, **kw))
    finally:
        os.close(fd)


def test_header_walk_matches_the_file(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    assert [h.base_offset for _, h in heads] == [0, 1, 3, 6, 7, 9, 12, 13, 15, 18, 19, 21]
    pos = 0
    for p, h in heads:
        assert p == pos
        pos += h.size
    assert pos == os.path.getsize(path)


def test_header_only_reads_only_headers(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    with open(path, "rb") as f:
        data = f.read()
    reads = []

    def read(pos, n):
        reads.append(n)
        return data[pos:pos + n]

    got = [(f.position, f.header) for f in walker.frames(read, 0, len(data), headers_only=True)]
    assert got == heads
    assert reads == [codec.HEADER_SIZE] * len(heads)


def test_strict_clean_file(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    res = _scan(path)
    assert res.error is None
    assert res.valid_bytes == os.path.getsize(path)
    assert [e[2] for e in res.entries] == [p for p, _ in heads]
    assert res.next_offset == heads[-1][1].last_offset + 1


def test_strict_stops_at_torn_tail_and_says_where(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 5)
    res = _scan(path)
    last_pos = heads[-1][0]
    assert res.error is not None and res.error.position == last_pos
    assert res.error.path == path and "truncated" in str(res.error)
    assert res.valid_bytes == last_pos
    assert len(res.entries) == len(heads) - 1
    assert res.next_offset == heads[-1][1].base_offset


def test_strict_stops_at_bad_crc_unless_indexing_it(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    bad_pos, bad = heads[4]
    _flip(path, bad_pos + bad.size - 3)  # inside the records: framing intact, CRC fails
    res = _scan(path)
    assert res.error is not None and res.error.position == bad_pos
    assert "CRC" in str(res.error)
    assert res.valid_bytes == bad_pos and len(res.entries) == 4
    # without CRC checks the framing alone is sound
    assert _scan(path, check_crc=False).error is None
    # index_bad_crc: the batch is listed, the error kept, the walk goes to the end
    res = _scan(path, index_bad_crc=True)
    assert res.error is not None and res.error.position == bad_pos
    assert len(res.entries) == len(heads) and res.valid_bytes == os.path.getsize(path)


def test_strict_checks_offset_continuity(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    res = _scan(path, expected_offset=5)
    assert res.error is not None and res.error.position == 0
    assert "expected 5" in str(res.error) and res.entries == []


def test_tolerant_resyncs_past_a_garbled_batch(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    bad_pos = heads[3][0]
    _flip(path, bad_pos + 16)  # the magic byte: the framing breaks here
    items = _walk(path)
    breaks = [i for i in items if isinstance(i, walker.FramingBreak)]
    batches = [i for i in items if isinstance(i, walker.Batch)]
    assert len(breaks) == 1
    brk = breaks[0]
    assert brk.position == bad_pos and brk.resume_at == heads[4][0]
    assert "magic" in brk.reason and "next intact batch at byte" in brk.describe()
    assert [b.position for b in batches] == [p for i, (p, _) in enumerate(heads) if i != 3]
    assert all(b.crc_valid for b in batches)
    # without resync the walk ends at the break
    items = _walk(path, resync=False)
    assert isinstance(items[-1], walker.FramingBreak) and items[-1].resume_at is None
    assert len(items) == 4


def test_tolerant_reports_bad_crc_and_goes_on(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    bad_pos, bad = heads[6]
    _flip(path, bad_pos + bad.size - 1)
    done = []
    items = _walk(path, keep_data=True, progress=done.append)
    assert [b.position for b in items] == [p for p, _ in heads]
    assert [b.crc_valid for b in items] == [i != 6 for i in range(len(heads))]
    assert items[2].data is not None and len(items[2].data) == heads[2][1].size
    assert sum(done) == os.path.getsize(path)


def test_tolerant_torn_tail_has_nothing_to_resync_to(tmp_path):
    path, heads = _build(str(tmp_path / "p"))
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 7)
    items = _walk(path)
    assert isinstance(items[-1], walker.FramingBreak)
    assert items[-1].position == heads[-1][0] and items[-1].resume_at is None
    assert "no intact batch follows" in items[-1].describe()


@pytest.mark.parametrize("chunk", [codec.HEADER_SIZE, 100, 333, 1 << 20])
def test_frames_across_chunk_sizes(tmp_path, chunk):
    """Buffers end mid-header and mid-batch, batches bigger than a chunk: each batch is
    found once, whole in its buffer."""
    path, heads = _build(str(tmp_path / "p"))
    with open(path, "rb") as f:
        data = f.read()

    def read(pos, n):
        return bytearray(data[pos:pos + n])

    got = []
    for f in walker.frames(read, 0, len(data), chunk=chunk):
        assert len(f.buf) - f.rel >= f.header.size
        assert codec.crc_ok(f.buf, f.rel, f.header)
        got.append((f.position, f.header))
    assert got == heads


def _blob(sizes: list[int], seed: int) -> list[bytes]:
    """Batches with `sizes` records each (varied values, deliverAfters)."""
    out, offset = [], 0
    for i, n in enumerate(sizes):
        out.append(codec.encode_batch(
            base_offset=offset, base_timestamp=T0 + i, deliver_after=T0 + (seed * 31 + i) % 97,
            keys=[None] * n, values=[b"v" * ((seed + i + j) % 50) for j in range(n)],
            timestamp_deltas=list(range(n))))
        offset += n
    return out


def _frames_until_break(read, end: int, chunk: int, columnar: bool):
    """(position, header fields) of every batch either walk finds, and (message, position)
    of the error it stops at (None at a clean end)."""
    got = []
    try:
        if columnar:
            for run in walker.frame_runs(read, 0, end, chunk=chunk):
                h = run.headers
                assert (h.rel + h.size <= len(run.buf)).all()  # whole in the buffer
                got.extend(zip((run.buf_pos + h.rel).tolist(), map(tuple, h.table[1:].T.tolist()),
                               strict=True))
        else:
            for f in walker.frames(read, 0, end, chunk=chunk):
                h = f.header
                got.append((f.position, (h.base_offset, h.size, h.last_offset_delta,
                                         h.base_timestamp, h.max_timestamp, h.deliver_after,
                                         h.record_count, h.crc)))
    except codec.CorruptLogError as e:
        return got, (str(e), e.position)
    return got, None


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(1, 70), min_size=1, max_size=12), seed=st.integers(0, 99),
       damage=st.lists(st.tuples(st.integers(0, 11),
                                 st.sampled_from([0, 8, 11, 16, 26, 68]) | st.integers(0, 80),
                                 st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]) | st.integers(0, 255)),
                       max_size=3),
       cut=st.integers(0, 300), chunk=st.sampled_from([69, 100, 333, 4096, 1 << 20]))
def test_columnar_walk_finds_what_frames_finds(sizes, seed, damage, cut, chunk):
    """frame_runs (one compiled header walk per read) finds the same batches as frames and
    stops at the same break with the same message, on intact, damaged and cut files, across
    chunk sizes that end reads mid-header and mid-batch."""
    batches = _blob(sizes, seed)
    starts = [sum(map(len, batches[:i])) for i in range(len(batches))]
    data = bytearray(b"".join(batches))
    for i, at, byte in damage:  # mostly inside a header: the fields its checks read
        pos = starts[i % len(starts)] + at
        if pos < len(data):
            data[pos] = byte
    data = bytes(data[:max(0, len(data) - cut)])

    def read(pos, n):
        return data[pos:pos + n]

    assert _frames_until_break(read, len(data), chunk, True) == \
        _frames_until_break(read, len(data), chunk, False)


def test_filtered_reader_skips_batches_out_of_bounds(tmp_path):
    pytest.importorskip("pyarrow")
    from kdelay.spark import scan

    path, heads = _build(str(tmp_path / "p"))
    d = str(tmp_path / "p")
    lo, hi = T0 + 1000, T0 + 3000
    want = [p for p, h in heads if lo <= h.deliver_after <= hi]
    assert 0 < len(want) < len(heads)
    bounds = scan.Bounds()
    bounds.narrow("deliver_after", lo, hi)
    reader = scan.SegmentReader(d, 0, bounds, use_index=False, chunk_bytes=256)
    got = [p for c in reader.chunks() for p in c.positions.tolist()]
    assert got == want
    assert reader.stats.mode == "scan" and reader.stats.batches_seen == len(heads)
    assert reader.stats.batches_read == len(want) and reader.stats.error is None
