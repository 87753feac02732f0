"""Microbenchmarks of kdelay's hot operations (pytest-benchmark).

    python -m pytest bench -p no:cacheprovider --benchmark-only

Not part of the normal test run (pyproject's testpaths is ["tests"]). Session fixtures
(bench/conftest.py) build the logs once: ~1M-record logs, a few seconds and ~500 MB of temp
disk. Every benchmark also checks its result, so a broken engine cannot post a fast time.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil

import pytest
from scaling import MICRO_RECORDS as N_RECORDS
from scaling import T0, dly_entries

from kdelay import Log, LogConfig
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.index_file import CHUNK_ENTRIES
from kdelay.log.batch import codec

# ---------------------------------------------------------------------------- codec


CODEC_SHAPES = ["homogeneous", "one-timestamp", "increasing-timestamps", "arbitrary-timestamps",
                "retry-header", "some-headers", "null-values", "mixed-sizes"]


def shape_batch(shape: str, n: int) -> dict:
    """encode_batch arguments for one batch shape a producer sends (16 B keys, 100 B values
    unless the shape says otherwise)."""
    rng = random.Random(f"{shape}-{n}")
    keys = [rng.randbytes(16) for _ in range(n)]
    values = [rng.randbytes(100) for _ in range(n)]
    inc = sorted(rng.randint(0, 20) for _ in range(n))
    inc = [d - inc[0] for d in inc]
    kw = {"keys": keys, "values": values, "base_timestamp": T0}
    if shape == "one-timestamp":
        kw["base_timestamp"] = T0 - 50
    elif shape == "increasing-timestamps":
        kw["timestamp_deltas"] = inc
    elif shape == "arbitrary-timestamps":
        kw["timestamp_deltas"] = [0] + [rng.randint(-5000, 5000) for _ in range(n - 1)]
    elif shape == "retry-header":
        kw["timestamp_deltas"] = inc
        kw["headers"] = [(("kdelay.attempt", b"2"),)] * n
    elif shape == "some-headers":
        kw["timestamp_deltas"] = inc
        kw["headers"] = [(("trace", rng.randbytes(8)),) if i % 10 == 3 else () for i in range(n)]
    elif shape == "null-values":
        kw["timestamp_deltas"] = inc
        kw["values"] = [None] * n
    elif shape == "mixed-sizes":
        kw["timestamp_deltas"] = inc
        kw["keys"] = [None if i % 7 == 0 else rng.randbytes(rng.randint(1, 40)) for i in range(n)]
        kw["values"] = [rng.randbytes(rng.randint(20, 300)) for _ in range(n)]
    elif shape != "homogeneous":
        raise AssertionError(shape)
    return kw


@pytest.mark.benchmark(group="codec-encode")
@pytest.mark.parametrize("n", [1, 10, 100, 1000])
@pytest.mark.parametrize("shape", CODEC_SHAPES)
def test_encode_batch(benchmark, shape, n):
    """encode_batch per shape and batch size; compare a shape's time with `homogeneous` of
    the same n (the issue's bound: 1.3x per record)."""
    kw = shape_batch(shape, n)
    benchmark.extra_info["records"] = n
    batch = benchmark(codec.encode_batch, base_offset=1000, deliver_after=T0 + 60_000, **kw)
    h = codec.parse_header(batch)
    assert h.record_count == n and codec.crc_ok(batch, 0, h)


@pytest.mark.benchmark(group="codec-decode")
@pytest.mark.parametrize("n", [1, 10, 100, 1000])
@pytest.mark.parametrize("shape", CODEC_SHAPES)
def test_decode_batch(benchmark, shape, n):
    kw = shape_batch(shape, n)
    benchmark.extra_info["records"] = n
    batch = codec.encode_batch(base_offset=1000, deliver_after=T0, **kw)
    h = codec.parse_header(batch)
    cols = benchmark(codec.decode_records, batch, h)
    assert cols.values == kw["values"] and cols.keys == kw["keys"]


# ---------------------------------------------------------------------------- append


@pytest.mark.benchmark(group="append")
def test_append_100_records(benchmark, bench_root, std_batch):
    """One Log.append of a 100-record batch (no fsync: flush_messages is None)."""
    path = os.path.join(bench_root, "append")
    clock_t = [T0]

    def clock() -> int:
        clock_t[0] += 1
        return clock_t[0]

    with Log.open(path, config=LogConfig(), clock=clock) as log:
        res = benchmark(log.append, std_batch, deliver_after=T0 + 60_000)
        assert res.last_offset - res.base_offset == 99
        assert log.log_end_offset == res.last_offset + 1
    shutil.rmtree(path)


# ---------------------------------------------------------------------------- fetch


@pytest.mark.benchmark(group="fetch")
def test_fetch_page_following_next(benchmark, paged_log):
    """A consumer's steady state: each fetch continues from the previous page's `next`
    (resumed index runs) over ~8 segments that all hold due and pending records."""
    log, _ = paged_log
    state = {"cursor": log.fetch(None).next}

    def page():
        res = log.fetch(state["cursor"])
        state["cursor"] = res.next
        return res

    # 300 pages x 500 records stay well inside the ~500k due records: no wrap-around
    res = benchmark.pedantic(page, rounds=300, iterations=1, warmup_rounds=2)
    assert len(res.records) == 500


@pytest.mark.benchmark(group="fetch")
def test_fetch_page_from_cursor_cold(benchmark, paged_log):
    """One page from a cursor no previous page ended at: every segment's index is
    searched afresh (a consumer restart, or a seek)."""
    log, mid = paged_log
    res = benchmark(log.fetch, mid)
    assert len(res.records) == 500
    assert (res.records[0].deliver_after, res.records[0].offset) > tuple(mid)


# ---------------------------------------------------------------------------- index


@pytest.mark.benchmark(group="index-build")
@pytest.mark.parametrize("n", [10_000, 100_000])
def test_index_build(benchmark, n):
    """DeliverAfterIndex.from_entries over n entries in scan (offset) order."""
    entries = dly_entries(n)
    idx = benchmark(DeliverAfterIndex.from_entries, 0, entries)
    assert len(idx) == n
    da = idx.disk_columns[0]
    assert (da[1:] >= da[:-1]).all()


@pytest.fixture(scope="module")
def index_100k():
    entries = dly_entries(100_000)
    return entries, DeliverAfterIndex.from_entries(0, entries)


@pytest.mark.benchmark(group="index-io")
def test_index_persist(benchmark, bench_root, index_100k):
    """Write a 100k-entry .dlyindex atomically (temp file, fsync, rename, fsync dir) and
    map it back."""
    entries, idx = index_100k
    path = os.path.join(bench_root, "persist.dlyindex")
    log_bytes = entries[-1][2] + entries[-1][4]
    benchmark(idx.persist, path, log_bytes=log_bytes, next_offset=len(entries) * 100)
    chunks = -(-len(entries) // CHUNK_ENTRIES)  # a 4-byte CRC each, after the columns
    assert os.path.getsize(path) == 64 + 32 * len(entries) + 4 * chunks


@pytest.mark.benchmark(group="index-io")
def test_index_load(benchmark, bench_root, index_100k):
    """Map a persisted 100k-entry .dlyindex, checking header, staleness and every chunk's
    CRC (as tools and Spark load it; the Log checks chunks as reads reach them)."""
    entries, idx = index_100k
    path = os.path.join(bench_root, "load.dlyindex")
    log_bytes = entries[-1][2] + entries[-1][4]
    idx.persist(path, log_bytes=log_bytes, next_offset=len(entries) * 100)
    loaded = benchmark(DeliverAfterIndex.load, path, base_offset=0, log_bytes=log_bytes)
    assert len(loaded) == len(entries)


@pytest.mark.benchmark(group="index-search")
def test_index_search(benchmark, index_100k):
    """start_in_columns: where a cursor falls in a 100k-entry persisted index."""
    entries, idx = index_100k
    rng = random.Random(9)
    probes = [(e[0], e[1] + rng.randint(-1, 99)) for e in rng.sample(entries, 1024)]
    cycle = itertools.cycle(probes)

    def search():
        return idx.start_in_columns(next(cycle))

    j = benchmark(search)
    assert 0 <= j <= len(entries)


# ---------------------------------------------------------------------------- open


@pytest.mark.benchmark(group="open")
def test_open_clean_1m(benchmark, closed_log_1m):
    """Log.open of a cleanly closed 1M-record log (closing it again is not timed)."""
    opened: list[Log] = []

    def setup():
        while opened:
            opened.pop().close()  # restores the clean-shutdown marker

    def open_log():
        log = Log.open(closed_log_1m)
        opened.append(log)
        return log

    log = benchmark.pedantic(open_log, setup=setup, rounds=10, iterations=1)
    assert log.load_report.clean and log.load_report.segments_scanned == 0
    assert log.log_end_offset == N_RECORDS
    setup()


@pytest.mark.benchmark(group="open")
def test_open_after_crash_1m(benchmark, bench_root, crash_image_1m):
    """Log.open of a fresh copy of a crashed live log: CRC scan of the ~110 MB active
    segment, torn tail truncated, indexes rebuilt (the copy is not timed)."""
    work = os.path.join(bench_root, "crash-work")
    opened: list[Log] = []

    def setup():
        while opened:
            opened.pop().close()
        if os.path.exists(work):
            shutil.rmtree(work)
        shutil.copytree(crash_image_1m, work)

    def open_log():
        log = Log.open(work)
        opened.append(log)
        return log

    log = benchmark.pedantic(open_log, setup=setup, rounds=5, iterations=1)
    assert not log.load_report.clean and log.load_report.bytes_truncated > 0
    assert log.log_end_offset == N_RECORDS
    opened.pop().close()
    shutil.rmtree(work)
