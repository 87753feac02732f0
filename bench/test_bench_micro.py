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
from kdelay.log import codec

# ---------------------------------------------------------------------------- codec


def _general_batch() -> tuple[list, list, list]:
    """100 records the template path cannot take: values of varying length, headers."""
    rng = random.Random(5)
    keys = [rng.randbytes(16) for _ in range(100)]
    values = [rng.randbytes(rng.randint(50, 150)) for _ in range(100)]
    headers = [[("trace", rng.randbytes(8))] for _ in range(100)]
    return keys, values, headers


def _batch_columns(std_batch, path: str):
    """Keys, values, headers of a batch for the codec's template path or its general path."""
    if path == "template":
        return [r.key for r in std_batch], [r.value for r in std_batch], None
    return _general_batch()


@pytest.mark.benchmark(group="codec")
@pytest.mark.parametrize("path", ["template", "general"])
def test_encode_batch(benchmark, std_batch, path):
    keys, values, headers = _batch_columns(std_batch, path)
    batch = benchmark(codec.encode_batch, base_offset=1000, base_timestamp=T0,
                      deliver_after=T0 + 60_000, keys=keys, values=values, headers=headers)
    h = codec.parse_header(batch)
    assert h.record_count == 100 and codec.crc_ok(batch, 0, h)


@pytest.mark.benchmark(group="codec")
@pytest.mark.parametrize("path", ["template", "general"])
def test_decode_batch(benchmark, std_batch, path):
    keys, values, headers = _batch_columns(std_batch, path)
    batch = codec.encode_batch(base_offset=1000, base_timestamp=T0, deliver_after=T0,
                               keys=keys, values=values, headers=headers)
    h = codec.parse_header(batch)
    cols = benchmark(codec.decode_records, batch, h)
    assert cols.values == values and cols.keys == keys


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
    assert os.path.getsize(path) == 64 + 32 * len(entries)


@pytest.mark.benchmark(group="index-io")
def test_index_load(benchmark, bench_root, index_100k):
    """Map a persisted 100k-entry .dlyindex, checking header, staleness and data CRC."""
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
