"""The three index kinds and their shared file format (kdelay/index)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import hypothesis.strategies as st
import numpy as np
import pytest
from conftest import entries_after
from hypothesis import given, settings

from kdelay.errors import IndexFileError
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.offset_index import OffsetIndex
from kdelay.index.time_index import TimeIndex

HEADER = struct.Struct("<8sqqqqqqII")  # as documented in index_file.py


def _batches(spec: list[tuple[int, int]], base: int = 100) -> list[tuple]:
    """(deliver_after, record count) per batch, in append order -> index entries."""
    entries, off, pos = [], base, 0
    for da, n in spec:
        size = 70 + 10 * n
        entries.append((da, off, pos, n - 1, size))
        off += n
        pos += size
    return entries


def _brute_after(entries, after):
    """Entries holding some record with key > after, in key order."""
    keep = [e for e in entries if after is None or (e[0], e[1] + e[3]) > tuple(after)]
    return sorted(keep)


# ---------------------------------------------------------------------------- offset / time

def test_offset_index_floor_and_lookup(tmp_path):
    idx = OffsetIndex(10)
    assert idx.lookup(10) == 0 and idx.floor(50) is None and idx.last_key() is None
    for off, pos in ((12, 100), (20, 400), (31, 900)):
        idx.add(off, pos)
    assert [idx.lookup(o) for o in (10, 11, 12, 19, 20, 30, 31, 1000)] == \
        [0, 0, 100, 100, 400, 400, 900, 900]
    path = os.fspath(tmp_path / "00000000000000000010.index")
    idx.persist(path, log_bytes=1000, next_offset=40)
    idx.add(45, 1000)  # recent, after the persisted entries
    assert [idx.lookup(o) for o in (11, 20, 44, 45, 99)] == [0, 400, 900, 1000, 1000]
    again = OffsetIndex.load(path, base_offset=10, log_bytes=1000)
    assert len(again) == 3 and again.meta.next_offset == 40
    assert [again.lookup(o) for o in (11, 25, 31)] == [0, 400, 900]
    assert [c.tolist() for c in again.columns()] == [[12, 20, 31], [100, 400, 900]]


def test_time_index(tmp_path):
    idx = TimeIndex(0)
    idx.add(1000, 5)
    idx.add(2000, 9)
    assert idx.offset_before(1000) is None
    assert idx.offset_before(1001) == 5
    assert idx.offset_before(5000) == 9
    path = os.fspath(tmp_path / "00000000000000000000.timeindex")
    idx.persist(path, log_bytes=77, next_offset=12)
    assert TimeIndex.load(path, base_offset=0, log_bytes=77).offset_before(1500) == 5


# ---------------------------------------------------------------------------- dly index

def test_deliver_after_index_orders_by_key():
    entries = _batches([(50, 2), (10, 3), (50, 1), (10, 1), (30, 4)])
    idx = DeliverAfterIndex(100)
    for e in entries:
        idx.add(*e)
    assert entries_after(idx, None) == sorted(entries)
    assert idx.min_deliver_after() == 10
    last = max(entries)
    assert idx.max_key() == (50, last[1] + last[3])
    assert idx.count_pending(10) == (7, 3)   # the 50s and the 30
    assert idx.count_pending(30) == (3, 2)
    assert idx.count_pending(50) == (0, 0)
    assert idx.count_pending(9) == (11, 5)


def test_entries_after_cursor_inside_a_batch():
    entries = _batches([(10, 3), (10, 2), (20, 1)])  # offsets 100-102, 103-104, 105
    idx = DeliverAfterIndex.from_entries(100, entries)
    assert [e[1] for e in entries_after(idx, (10, 101))] == [100, 103, 105]
    assert [e[1] for e in entries_after(idx, (10, 102))] == [103, 105]
    assert [e[1] for e in entries_after(idx, (10, 104))] == [105]
    assert [e[1] for e in entries_after(idx, (15, 0))] == [105]
    assert entries_after(idx, (20, 105)) == []


entry_specs = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)), min_size=0,
                       max_size=25)


@settings(max_examples=150, deadline=None)
@given(spec=entry_specs, split=st.integers(0, 25), cursor=st.one_of(
    st.none(), st.tuples(st.integers(-1, 7), st.integers(95, 200))), data=st.data())
def test_entries_after_matches_brute_force(tmp_path_factory, spec, split, cursor, data):
    entries = _batches(spec)
    persisted, recent = entries[:split], entries[split:]
    idx = DeliverAfterIndex(100)
    for e in persisted:
        idx.add(*e)
    if persisted and data.draw(st.booleans()):
        path = os.fspath(tmp_path_factory.mktemp("d") / "00000000000000000100.dlyindex")
        idx.persist(path, log_bytes=10**6, next_offset=10**3)
    for e in recent:
        idx.add(*e)
    assert entries_after(idx, cursor) == _brute_after(entries, cursor)
    assert [tuple(int(x) for x in row) for row in zip(*idx.columns(), strict=True)] == \
        sorted(entries)
    if entries:
        assert idx.max_key() == max((e[0], e[1] + e[3]) for e in entries)
        assert idx.min_deliver_after() == min(e[0] for e in entries)
        now = data.draw(st.integers(-1, 7))
        late = [e for e in entries if e[0] > now]
        assert idx.count_pending(now) == (sum(e[3] + 1 for e in late), len(late))


# ---------------------------------------------------------------------------- file format

def _persisted(tmp_path, entries=None):
    entries = entries or _batches([(30, 2), (10, 1), (20, 3)])
    idx = DeliverAfterIndex.from_entries(100, entries)
    path = os.fspath(tmp_path / "00000000000000000100.dlyindex")
    idx.persist(path, log_bytes=4321, next_offset=106)
    return path, entries


def test_file_format_as_documented(tmp_path):
    """Version 2: header, columns, then one CRC per chunk of 4096 entries (every column's
    slice of the chunk in turn), the table's CRC in the header."""
    n = 10_000  # three chunks, the last one short
    path, entries = _persisted(tmp_path, _batches([(i % 7, 1 + i % 3) for i in range(n)]))
    raw = Path(path).read_bytes()
    magic, base, log_bytes, next_off, count, chunk, _r, table_crc, head_crc = \
        HEADER.unpack_from(raw)
    assert (magic, base, log_bytes, next_off, count) == (b"KDLYIDX2", 100, 4321, 106, n)
    assert chunk == 4096
    assert head_crc == crc32c.crc32c(raw[:56])
    body = raw[64:]
    assert len(body) == n * (8 + 8 + 8 + 4 + 4) + 3 * 4
    cols, pos = [], 0
    for dt in ("<i8", "<i8", "<i8", "<i4", "<i4"):
        w = np.dtype(dt).itemsize * n
        cols.append(np.frombuffer(body[pos:pos + w], dtype=dt))
        pos += w
    assert list(zip(*(c.tolist() for c in cols), strict=True)) == sorted(entries)
    table = body[pos:]
    assert table_crc == crc32c.crc32c(table)
    want = [crc32c.crc32c(b"".join(c[a:a + 4096].tobytes() for c in cols))
            for a in (0, 4096, 8192)]
    assert list(struct.unpack("<3I", table)) == want


def test_empty_index_file(tmp_path):
    path = os.fspath(tmp_path / "00000000000000000007.index")
    OffsetIndex(7).persist(path, log_bytes=0, next_offset=7)
    assert os.path.getsize(path) == 64
    idx = OffsetIndex.load(path, base_offset=7, log_bytes=0)
    assert len(idx) == 0 and idx.meta.next_offset == 7


def _rewrite(path, fn):
    raw = bytearray(Path(path).read_bytes())
    fn(raw)
    with open(path, "wb") as f:
        f.write(raw)


def _fix_header_crc(raw: bytearray) -> None:
    raw[60:64] = struct.pack("<I", crc32c.crc32c(bytes(raw[:56])))


DAMAGE = {
    "missing": None,
    "empty": lambda raw: raw.__delitem__(slice(0, None)),
    "short_header": lambda raw: raw.__delitem__(slice(40, None)),
    "truncated_body": lambda raw: raw.__delitem__(slice(len(raw) - 3, None)),
    "extra_bytes": lambda raw: raw.extend(b"\0" * 32),
    "bad_magic": lambda raw: raw.__setitem__(slice(0, 8), b"KOFFIDX1"),
    "header_bit": lambda raw: raw.__setitem__(20, raw[20] ^ 1),
    "body_bit": lambda raw: raw.__setitem__(70, raw[70] ^ 0x10),
    "last_byte": lambda raw: raw.__setitem__(len(raw) - 1, raw[-1] ^ 0xFF),
    # a consistent header for the wrong segment / a stale log size
    "other_base": lambda raw: (raw.__setitem__(slice(8, 16), struct.pack("<q", 99)),
                               _fix_header_crc(raw)),
    "stale": lambda raw: (raw.__setitem__(slice(16, 24), struct.pack("<q", 4000)),
                          _fix_header_crc(raw)),
    "entries_lie": lambda raw: (raw.__setitem__(slice(32, 40), struct.pack("<q", 2)),
                                _fix_header_crc(raw)),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_load_rejects_damage(tmp_path, kind):
    path, _ = _persisted(tmp_path)
    if DAMAGE[kind] is None:
        os.unlink(path)
    else:
        _rewrite(path, DAMAGE[kind])
    with pytest.raises(IndexFileError):
        DeliverAfterIndex.load(path, base_offset=100, log_bytes=4321)


def test_load_rejects_another_kind(tmp_path):
    path, _ = _persisted(tmp_path)
    with pytest.raises(IndexFileError):
        OffsetIndex.load(path, base_offset=100, log_bytes=4321)


def test_persist_is_atomic_and_reloads(tmp_path):
    path, entries = _persisted(tmp_path)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    idx = DeliverAfterIndex.load(path, base_offset=100, log_bytes=4321)
    idx.add(5, 106, 4321, 0, 80)
    idx.persist(path, log_bytes=4401, next_offset=107)
    again = DeliverAfterIndex.load(path, base_offset=100, log_bytes=4401)
    assert entries_after(again, None) == sorted(entries + [(5, 106, 4321, 0, 80)])
    with pytest.raises(IndexFileError):
        DeliverAfterIndex.load(path, base_offset=100, log_bytes=4321)  # now stale


@settings(max_examples=100, deadline=None)
@given(spec=entry_specs, split=st.integers(0, 25), now=st.integers(-1, 7))
def test_first_after_matches_brute_force(tmp_path_factory, spec, split, now):
    entries = _batches(spec)
    idx = DeliverAfterIndex(100)
    for e in entries[:split]:
        idx.add(*e)
    if split:
        path = os.fspath(tmp_path_factory.mktemp("f") / "00000000000000000100.dlyindex")
        idx.persist(path, log_bytes=10**6, next_offset=10**3)
    for e in entries[split:]:
        idx.add(*e)
    late = [e[0] for e in entries if e[0] > now]
    assert idx.first_after(now) == (min(late) if late else None)
