"""Per-chunk checksums of persisted indexes, checked lazily (kdelay/index/chunk_checks.py,
index_file.py): the chunk rule; damage to a real file found by the first read that reaches
it, never used, never written out or encoded for upload, and reported by the lenient
reader; `encoded` (what tiered storage uploads) is the file `persist` writes; searches and
windows that stay correct at every entry count around the chunk boundaries; version 1
files still read."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import hypothesis.strategies as st
import numpy as np
import pytest
from conftest import chunks_of, rewrite_as_version_1
from hypothesis import given, settings

from kdelay.errors import CorruptLogError, IndexFileError
from kdelay.index import index_file
from kdelay.index.chunk_checks import chunk_table
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.offset_index import OffsetIndex
from kdelay.testing.damage import flip_byte

LOG_BYTES = 10**6
WIDTHS = [d.itemsize for d in DeliverAfterIndex.DTYPES]


def _entries(n: int, base: int = 100) -> list[tuple]:
    """n batches in key order; deliverAfters repeat, so searches split ties by offset."""
    out, off = [], base
    for i in range(n):
        lod = i % 3
        out.append((i // 2, off, 80 * i, lod, 80))
        off += lod + 1
    return out


def _persist(directory, entries: list[tuple]) -> str:
    path = os.fspath(directory / "00000000000000000100.dlyindex")
    end = entries[-1][1] + entries[-1][3] + 1 if entries else 100
    DeliverAfterIndex.from_entries(100, entries).persist(path, log_bytes=LOG_BYTES,
                                                         next_offset=end)
    return path


def _lazy(path: str) -> DeliverAfterIndex:
    return DeliverAfterIndex.load(path, base_offset=100, log_bytes=LOG_BYTES, lazy=True)


def _flip(path: str, pos: int, bit: int = 0x20) -> None:
    flip_byte(path, pos, bit)


def _byte_of(n: int, column: int, entry: int) -> int:
    """Where entry `entry` of column `column` lies in a .dlyindex of n entries."""
    return index_file.HEADER_SIZE + n * sum(WIDTHS[:column]) + entry * WIDTHS[column]


# ---------------------------------------------------------------------------- the chunk rule

@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), chunk=st.integers(1, 9), seed=st.integers(0, 99))
def test_a_chunk_crc_covers_its_entries_of_every_column_in_turn(n, chunk, seed):
    rng = np.random.default_rng(seed)
    cols = [rng.integers(-2**40, 2**40, n).astype(d) for d in DeliverAfterIndex.DTYPES]
    want = [crc32c.crc32c(b"".join(c[a:a + chunk].tobytes() for c in cols))
            for a in range(0, n, chunk)]
    assert chunk_table(cols, chunk).tolist() == want


# ---------------------------------------------------------------------------- a real file

C = index_file.CHUNK_ENTRIES
N = 4 * C + C // 3  # five chunks, the last one short
SPANS = [(k * C, min(N, (k + 1) * C)) for k in range(5)]


@pytest.mark.parametrize("column", [0, 2, 4])
@pytest.mark.parametrize("chunk", range(5))
def test_a_damaged_chunk_is_found_before_any_entry_of_it_is_used(tmp_path, chunk, column):
    """The first and last chunks are checked on loading (opening a log reads a segment's
    first and last keys: the loader rebuilds the index); any other on the first read
    that reaches it."""
    entries = _entries(N)
    path = _persist(tmp_path, entries)
    start, stop = SPANS[chunk]
    _flip(path, _byte_of(N, column, (start + stop) // 2))

    reading = DeliverAfterIndex.read_lenient(path)  # tools check every chunk
    assert reading.problems == ["data checksum mismatch"] and not reading.data_crc_ok
    assert reading.damaged_entries == [SPANS[chunk]]
    with pytest.raises(IndexFileError, match=f"entries {start}..{stop - 1}"):
        DeliverAfterIndex.load(path, base_offset=100, log_bytes=LOG_BYTES)
    if chunk in (0, 4):
        with pytest.raises(IndexFileError, match=f"entries {start}..{stop - 1}"):
            _lazy(path)
        return

    idx = _lazy(path)  # header, chunk table, first and last chunk
    assert idx.min_deliver_after() == 0
    assert idx.max_key() == max((e[0], e[1] + e[3]) for e in entries)
    # the page fill's windows: every entry before the damaged chunk, then the error
    end, seen = 0, 0
    with pytest.raises(CorruptLogError) as caught:
        while end < N:
            end = idx.chunks.window_end(end, 500)
            seen = end
    assert seen == start == idx.chunks.checked_prefix and not idx.chunks.complete
    assert caught.value.path == path
    assert caught.value.position == _byte_of(N, 0, start)
    assert f"entries {start}..{stop - 1}" in str(caught.value)
    assert not os.path.exists(path)  # removed: the next open rebuilds it from the .log
    with pytest.raises(CorruptLogError):  # and still never used
        idx.columns()


@pytest.mark.parametrize("where, problem", [
    (lambda n: 20, "header checksum mismatch"),
    (lambda n: index_file.HEADER_SIZE + n * sum(WIDTHS) + 5, "chunk table checksum mismatch"),
])
def test_damage_to_the_header_or_chunk_table_is_found_on_loading(tmp_path, where, problem):
    path = _persist(tmp_path, _entries(N))
    _flip(path, where(N))
    with pytest.raises(IndexFileError, match=problem):
        _lazy(path)
    assert DeliverAfterIndex.read_lenient(path).problems == [problem]


def test_a_damaged_index_is_never_written_out_again(tmp_path):
    path = _persist(tmp_path, _entries(N))
    _flip(path, _byte_of(N, 1, 2 * C + 5))
    idx = _lazy(path)
    idx.add(10**6, 10**6, 10**6, 0, 80)
    copy = os.fspath(tmp_path / "copy.dlyindex")
    with pytest.raises(CorruptLogError):
        idx.persist(copy, log_bytes=LOG_BYTES, next_offset=10**6 + 1)
    assert not os.path.exists(copy)


def test_a_damaged_index_is_never_encoded_for_upload(tmp_path):
    # tiered storage uploads `encoded` as the index object: never under a fresh checksum
    path = _persist(tmp_path, _entries(N))
    _flip(path, _byte_of(N, 3, 3 * C + 1))
    with pytest.raises(CorruptLogError):
        _lazy(path).encoded(log_bytes=LOG_BYTES, next_offset=10**6)


@settings(max_examples=12, deadline=None)
@given(n=st.sampled_from([0, 1, C - 1, C, C + 1, 2 * C + 1]), recent=st.integers(0, 3))
def test_encoded_is_the_version_2_file_persist_writes(tmp_path_factory, n, recent):
    directory = tmp_path_factory.mktemp("enc")
    idx = _lazy(_persist(directory, _entries(n)))
    for i in range(recent):  # entries appended since the index was persisted
        idx.add(10**6 + i, 10**6 + i, 80 * (n + i), 0, 80)
    kw = {"log_bytes": LOG_BYTES + recent, "next_offset": 10**6 + recent}
    encoded = idx.encoded(**kw)
    path = os.fspath(directory / "again.dlyindex")
    idx.persist(path, **kw)
    assert encoded == Path(path).read_bytes()
    assert encoded[:8] == b"KDLYIDX2"
    chunks = -(-(n + recent) // C)
    assert len(encoded) == index_file.HEADER_SIZE + (n + recent) * sum(WIDTHS) + 4 * chunks


def test_a_search_answer_its_neighbours_do_not_bear_out_checks_every_chunk(tmp_path):
    """What `certify` does when damage elsewhere misled a search: numpy's binary search
    probes both neighbours of its answer, so this is the net under another algorithm."""
    with chunks_of(4):
        path = _persist(tmp_path, _entries(16))
    _flip(path, _byte_of(16, 1, 5))  # chunk 1 damaged
    chunks = _lazy(path).chunks
    da = chunks.columns[0]
    chunks.certify(16, da[15], None, 7)  # right: only the last chunk is needed
    with pytest.raises(CorruptLogError, match="entries 4..7"):
        chunks.certify(13, da[12], da[13], 1)  # in chunk 3, sound; the answer is 4


# ---------------------------------------------------------------------------- boundaries

def _reference(entries: list[tuple]) -> DeliverAfterIndex:
    return DeliverAfterIndex.from_entries(100, entries)  # in memory: nothing to check


def _same_or_refused(got, want, damaged: int | None) -> None:
    """A read over a damaged index either answers as the sound one does or raises; over
    a sound one it answers."""
    if isinstance(got, CorruptLogError):
        assert damaged is not None, got
    else:
        assert got == want


def _call(fn, *args):
    try:
        return fn(*args)
    except CorruptLogError as e:
        return e


cursors = st.one_of(st.none(), st.tuples(st.integers(-1, 10), st.integers(95, 150)))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 23), damaged=st.one_of(st.none(), st.integers(0, 5)),
       column=st.integers(0, 4), data=st.data())
def test_reads_around_chunk_boundaries_are_right_or_refused(tmp_path_factory, n, damaged,
                                                            column, data):
    """Chunks of 4 entries: n from 1 to 23 puts the entry count either side of every
    boundary of up to six chunks. With one chunk damaged, each read answers as the sound
    index does or raises CorruptLogError; with none, it always answers."""
    entries = _entries(n)
    ref = _reference(entries)
    with chunks_of(4):
        path = _persist(tmp_path_factory.mktemp("c"), entries)
    chunks = -(-n // 4)
    if damaged is not None:
        damaged %= chunks
        entry = min(n - 1, damaged * 4 + data.draw(st.integers(0, 3)))
        # a small change, or the sign bit: a search probing there goes the wrong way
        top = data.draw(st.booleans())
        _flip(path, _byte_of(n, column, entry) + (WIDTHS[column] - 1 if top else 0),
              0x80 if top else 0x20)
    if damaged in (0, chunks - 1):  # checked on loading
        with pytest.raises(IndexFileError):
            _lazy(path)
        return
    idx = _lazy(path)
    if damaged is None:  # the first and last chunks are checked on loading
        assert idx.chunks.checked_prefix == (n if n <= 8 else 4)
        assert idx.chunks.complete == (n <= 8)
    for _ in range(6):
        op = data.draw(st.sampled_from(["start", "first_after", "pending", "max", "min",
                                        "window"]))
        now = data.draw(st.integers(-1, 9))
        if op == "start":
            cursor = data.draw(cursors)
            _same_or_refused(_call(idx.start_in_columns, cursor),
                             ref.start_in_columns(cursor), damaged)
        elif op == "first_after":
            _same_or_refused(_call(idx.first_after, now), ref.first_after(now), damaged)
        elif op == "pending":
            _same_or_refused(_call(idx.count_pending, now), ref.count_pending(now), damaged)
        elif op == "max":
            assert idx.max_key() == ref.max_key()
        elif op == "min":
            assert idx.min_deliver_after() == ref.min_deliver_after()
        else:
            start = data.draw(st.integers(0, n))
            end = _call(idx.chunks.window_end, start, data.draw(st.integers(1, 6)))
            if isinstance(end, CorruptLogError):
                assert damaged is not None
            else:  # its entries from `start` on are checked: the sound ones
                assert start <= end <= n and (end == n or end % 4 == 0)
                got = list(zip(*(c[start:end].tolist() for c in idx.chunks.columns),
                               strict=True))
                assert got == entries[start:end]
    if damaged is None:
        idx.chunks.check_all()
        assert idx.chunks.complete and idx.chunks.checked_prefix == n
    assert os.path.exists(path) or damaged is not None


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 21), damaged=st.one_of(st.none(), st.integers(0, 5)),
       keys=st.lists(st.integers(0, 45), min_size=1, max_size=8))
def test_offset_lookups_around_chunk_boundaries_are_right_or_refused(tmp_path_factory, n,
                                                                     damaged, keys):
    ref, written = OffsetIndex(0), OffsetIndex(0)
    for i in range(n):
        ref.add(3 * i + 1, 100 * i)
        written.add(3 * i + 1, 100 * i)
    path = os.fspath(tmp_path_factory.mktemp("o") / "00000000000000000000.index")
    with chunks_of(4):
        written.persist(path, log_bytes=LOG_BYTES, next_offset=3 * n + 1)
    chunks = -(-n // 4)
    if damaged is not None:
        damaged %= chunks
        _flip(path, index_file.HEADER_SIZE + 8 * min(n - 1, damaged * 4))
    if damaged in (0, chunks - 1):  # checked on loading
        with pytest.raises(IndexFileError):
            OffsetIndex.load(path, base_offset=0, log_bytes=LOG_BYTES, lazy=True)
        return
    idx = OffsetIndex.load(path, base_offset=0, log_bytes=LOG_BYTES, lazy=True)
    assert idx.last_key() == 3 * n - 2
    for key in keys:
        _same_or_refused(_call(idx.lookup, key), ref.lookup(key), damaged)


# ---------------------------------------------------------------------------- version 1

def test_a_version_1_file_is_read_and_checked_whole(tmp_path):
    entries = _entries(N)
    path = _persist(tmp_path, entries)
    rewrite_as_version_1(path)
    assert Path(path).read_bytes()[:8] == b"KDLYIDX1"
    for lazy in (False, True):
        idx = DeliverAfterIndex.load(path, base_offset=100, log_bytes=LOG_BYTES, lazy=lazy)
        assert idx.chunks.complete
        assert list(zip(*(c.tolist() for c in idx.columns()), strict=True)) == entries
    reading = DeliverAfterIndex.read_lenient(path)
    assert reading.problems == [] and reading.magic == b"KDLYIDX1" and reading.entries == N

    idx.persist(path, log_bytes=LOG_BYTES, next_offset=10**6)  # written again: version 2
    assert Path(path).read_bytes()[:8] == b"KDLYIDX2"

    rewrite_as_version_1(path)
    _flip(path, _byte_of(N, 3, 3 * C // 2))
    with pytest.raises(IndexFileError, match="data checksum mismatch"):
        _lazy(path)
    assert DeliverAfterIndex.read_lenient(path).problems == ["data checksum mismatch"]


@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from([0, 1, C + 1]), version_1=st.booleans(), data=st.data())
def test_loading_and_the_lenient_reader_name_the_same_damage(tmp_path_factory, n, version_1,
                                                             data):
    """Whatever byte past the header is damaged (the chunk table's CRC in the header
    included), loading refuses the file with the problem the lenient reader reports."""
    path = _persist(tmp_path_factory.mktemp("idx"), _entries(n))
    if version_1:
        rewrite_as_version_1(path)
    size = os.path.getsize(path)
    _flip(path, data.draw(st.sampled_from([56, *range(index_file.HEADER_SIZE, size)])))
    problems = DeliverAfterIndex.read_lenient(path).problems
    assert len(problems) == 1
    with pytest.raises(IndexFileError) as refused:
        DeliverAfterIndex.load(path, base_offset=100, log_bytes=LOG_BYTES)
    assert str(refused.value).startswith(f"{path}: {problems[0]}")
