"""LogSegment and scan_log: the unit below Log (kdelay/log/segments/segment.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import T0, entries_after

from kdelay import CorruptLogError
from kdelay.errors import IndexFileError
from kdelay.index.entry import Entry
from kdelay.log.batch import codec
from kdelay.log.batch.walker import scan_log
from kdelay.log.segments.layout import parse_segment_name, segment_name
from kdelay.log.segments.segment import LogSegment


def _batch(base: int, n: int, da: int, value: bytes = b"v") -> bytes:
    return codec.encode_batch(base_offset=base, base_timestamp=T0, deliver_after=da,
                              keys=[None] * n, values=[value] * n, timestamp_deltas=None,
                              headers=None)


def _fill(seg: LogSegment, spec, interval: int = 1) -> list[tuple[int, int]]:
    """Append batches (n, da); returns (position, size) of each."""
    out = []
    for n, da in spec:
        b = _batch(seg.next_offset, n, da, b"x" * 20)
        pos = seg.tail.append(b, seg.next_offset, n - 1, da, T0, interval)
        out.append((pos, len(b)))
    return out


def test_the_mapping_covers_the_log_and_grows_with_it(tmp_path):
    """LogSegment.mapped: a mapping of at least the .log's bytes, kept while appends fit in
    its room, remapped once they do not, unmapped by close."""
    seg = LogSegment.create(os.fspath(tmp_path), 0)
    _fill(seg, [(1, T0)])
    first = seg.mapped()
    assert first.capacity >= seg.size and seg.mapped() is first
    _fill(seg, [(2, T0)] * 3)
    assert seg.mapped() is first  # grown into its room: the same mapping
    seg.size = first.capacity + 1  # (as if appends had outgrown it)
    second = seg.mapped()
    assert second is not first and first.closed and second.capacity > seg.size
    seg.size = os.path.getsize(seg.log_path)
    seg.close()
    assert second.closed


def test_names():
    assert segment_name(42) == "00000000000000000042"
    assert parse_segment_name("00000000000000000042.dlyindex") == (42, ".dlyindex")
    assert parse_segment_name("42.log") is None
    assert parse_segment_name("0000000000000000004x.log") is None
    assert parse_segment_name(".lock") is None


def test_append_read_find(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 10)
    spec = [(2, T0 + 5), (1, T0), (3, T0 + 5)]
    placed = _fill(seg, spec)
    assert seg.next_offset == 16 and seg.size == sum(s for _, s in placed)

    def entry(i: int, base: int, size: int) -> Entry:
        """The index entry of batch i, but for its base offset and size."""
        return Entry(spec[i][1], base, placed[i][0], spec[i][0] - 1, size)

    for i, ((_, size), base) in enumerate(zip(placed, (10, 12, 13), strict=True)):
        assert len(seg.read_verified(entry(i, base, size))[1]) == size
    assert [seg.find_batch(o)[0] for o in range(10, 16)] == \
        [placed[0][0]] * 2 + [placed[1][0]] + [placed[2][0]] * 3
    assert seg.find_batch(9) is None and seg.find_batch(16) is None
    assert [h.base_offset for _, h in seg.batch_headers()] == [10, 12, 13]
    with pytest.raises(CorruptLogError):
        seg.read_verified(entry(1, 11, placed[1][1]))  # wrong expected base
    with pytest.raises(CorruptLogError):
        seg.read_verified(entry(1, 12, placed[1][1] - 1))  # wrong size
    keys = [(e[0], e[1]) for e in entries_after(seg.dly_index, None)]
    assert keys == [(T0, 12), (T0 + 5, 10), (T0 + 5, 13)]
    seg.close()


def test_persist_then_load_reads_indexes(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 0)
    _fill(seg, [(2, T0 + 9), (4, T0), (1, T0 + 3)])
    seg.persist_indexes()
    want = entries_after(seg.dly_index, None)
    seg.close()
    loaded = LogSegment.load(d, 0)
    assert loaded.next_offset == 7 and loaded.size == os.path.getsize(
        os.path.join(d, "00000000000000000000.log"))
    assert entries_after(loaded.dly_index, None) == want
    assert loaded.find_batch(5)[1].base_offset == 2
    loaded.close()


def test_load_refuses_stale_index(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 0)
    _fill(seg, [(2, T0)])
    seg.persist_indexes()
    _fill(seg, [(1, T0)])  # the log grew after the indexes were written
    seg.close()
    with pytest.raises(IndexFileError):
        LogSegment.load(d, 0)


def test_load_refuses_indexes_from_different_moments(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 0)
    _fill(seg, [(2, T0)])
    seg.persist_indexes()
    old = Path(d, "00000000000000000000.index").read_bytes()
    _fill(seg, [(1, T0)])
    seg.persist_indexes()
    seg.close()
    Path(d, "00000000000000000000.index").write_bytes(old)
    with pytest.raises(IndexFileError):
        LogSegment.load(d, 0)


def test_recover_rebuilds_same_indexes(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 5)
    _fill(seg, [(2, T0 + 9), (4, T0), (1, T0 + 3), (3, T0)], interval=1)
    want_dly = entries_after(seg.dly_index, None)
    want_off = [c.tolist() for c in seg.offset_index.columns()]
    seg.close()
    rec, err = LogSegment.recover(d, 5, index_interval_bytes=1, check_crc=True, truncate=True)
    assert err is None
    assert entries_after(rec.dly_index, None) == want_dly
    assert [c.tolist() for c in rec.offset_index.columns()] == want_off
    assert rec.next_offset == 15
    rec.close()


def test_scan_log_stops_at_damage(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 0)
    placed = _fill(seg, [(1, T0), (2, T0), (1, T0)])
    path = seg.log_path
    seg.close()
    raw = bytearray(Path(path).read_bytes())
    raw[placed[1][0] + placed[1][1] - 1] ^= 1
    Path(path).write_bytes(bytes(raw))
    fd = os.open(path, os.O_RDONLY)
    try:
        res = scan_log(fd, path, 0)
        assert len(res.entries) == 1 and res.valid_bytes == placed[1][0]
        assert res.next_offset == 1
        assert res.error is not None and res.error.position == placed[1][0]
        assert res.error.path == path
        # without CRC checks the framing is still sound
        assert len(scan_log(fd, path, 0, check_crc=False).entries) == 3
        # offset continuity is checked too
        res = scan_log(fd, path, 0, check_crc=False, expected_offset=7)
        assert res.entries == [] and res.error is not None
    finally:
        os.close(fd)


def test_recover_truncates_torn_tail(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 0)
    placed = _fill(seg, [(1, T0), (2, T0)])
    path = seg.log_path
    seg.close()
    with open(path, "r+b") as f:
        f.truncate(placed[1][0] + 10)
    rec, err = LogSegment.recover(d, 0, index_interval_bytes=1, check_crc=True, truncate=True)
    assert err is not None and rec.size == placed[1][0] == os.path.getsize(path)
    assert rec.next_offset == 1
    rec.close()


def test_delete_removes_all_files(tmp_path):
    d = os.fspath(tmp_path)
    seg = LogSegment.create(d, 3)
    _fill(seg, [(1, T0)])
    seg.persist_indexes()
    assert len(os.listdir(d)) == 4
    seg.delete()
    assert os.listdir(d) == []
