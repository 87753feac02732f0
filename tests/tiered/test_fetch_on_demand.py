"""What the due-order read fetches of remote-only segments, with chunks far smaller than a
segment so that a page's reads show: the same records as the same log held locally (any
page size, cancellations, a cache that evicts mid-drain); a page fetches bytes only from
the segments it returns records from, and a one-record page only that record's batch."""

from __future__ import annotations

import functools
import os
import shutil

import pytest
from conftest import FakeClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record
from kdelay.log.tiered import remote_segment
from kdelay.log.tiered.chunk_cache import ChunkCache
from kdelay.log.tiered.remote_segment import RemoteSegment
from kdelay.testing.checks import fetch_everything
from kdelay.testing.tiering import drop_local


def _build(root: str, delays: list[int], cancels: list[int], clock: FakeClock) -> str:
    """A log (and a local copy of it, `<root>/local`) whose sealed segments are all held
    only in a file:// store; returns its directory."""
    directory = os.path.join(root, "p-0")
    cfg = LogConfig(remote_storage=f"file://{root}/store", segment_bytes=1500,
                    index_interval_bytes=200, local_retention_ms=-1)
    log = Log.open(directory, config=cfg, clock=clock)
    for i, delay in enumerate(delays):
        log.append([Record(b"v%04d" % i + b"x" * 30)] * (1 + i % 3), delay_ms=delay)
    end = log.metrics()["log_end_offset"]
    log.cancel(sorted({c for c in cancels if c < end}))
    log.sync_remote()
    bases = log.segments[:-1]
    log.close()
    shutil.copytree(directory, os.path.join(root, "local"))
    drop_local(directory, bases)
    return directory


@pytest.fixture
def small_chunks(monkeypatch):
    def use(chunk: int) -> None:
        monkeypatch.setattr(remote_segment, "ChunkCache", functools.partial(ChunkCache,
                                                                             chunk=chunk))
    return use


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(delays=st.lists(st.integers(0, 900), min_size=30, max_size=150),
       cancels=st.lists(st.integers(0, 300), max_size=30),
       chunk=st.sampled_from([1, 64, 700, 1 << 18]),
       cache=st.sampled_from([1, 2000, 1 << 30]),
       pages=st.lists(st.sampled_from([1, 3, 17, 500]), min_size=1, max_size=3))
def test_fetching_on_demand_reads_what_the_local_log_holds(
        tmp_path_factory, small_chunks, delays, cancels, chunk, cache, pages):
    small_chunks(chunk)
    root = os.fspath(tmp_path_factory.mktemp("log"))
    clock = FakeClock()
    directory = _build(root, delays, cancels, clock)
    clock.advance(500)  # some due, some not
    local = Log.open(os.path.join(root, "local"), config=LogConfig(segment_bytes=1500),
                     clock=clock)
    expected = [fetch_everything(local, page) for page in pages]
    local.close()
    log = Log.open(directory, config=LogConfig(
        remote_storage=f"file://{root}/store", segment_bytes=1500, remote_cache_bytes=cache),
        clock=clock)
    try:
        assert [fetch_everything(log, page) for page in pages] == expected
    finally:
        log.close()


def test_a_page_fetches_only_from_the_segments_it_returns_records_from(
        tmp_path, small_chunks):
    small_chunks(1)
    clock = FakeClock()
    directory = _build(os.fspath(tmp_path), [(i * 53) % 900 for i in range(200)], [], clock)
    clock.advance(1000)
    cfg = LogConfig(remote_storage=f"file://{tmp_path}/store", segment_bytes=1500)
    for page in (1, 7, 40):
        log = Log.open(directory, config=cfg, clock=clock)
        try:
            remote = {s.base_offset: s for s in log._segments if isinstance(s, RemoteSegment)}
            assert len(remote) >= 8
            records = log.fetch(None, max_records=page).records
            holding = {log._segments.segment_for(r.offset).base_offset for r in records}
            fetched = {base for base, s in remote.items() if s._bytes.cached_bytes}
            assert fetched == holding
            if page == 1:  # exactly the batch of the record, with 1-byte chunks
                seg = remote[holding.pop()]
                _, base, _, lod, size = seg.dly_index.columns()
                batch = ((base <= records[0].offset) & (records[0].offset <= base + lod))
                assert seg._bytes.cached_bytes == int(size[batch][0])
        finally:
            log.close()


@pytest.mark.parametrize("page", [1, 7, 40])
def test_a_page_fetches_the_indexes_of_only_the_segments_it_reads(tmp_path, page):
    """Remote-only segments due one after another: a page takes up (and so fetches the
    index of) only the segments it returns records from, not every segment with
    something due."""
    clock = FakeClock()
    directory = _build(os.fspath(tmp_path), [i * 5 for i in range(200)], [], clock)
    clock.advance(10_000)
    cfg = LogConfig(remote_storage=f"file://{tmp_path}/store", segment_bytes=1500)
    log = Log.open(directory, config=cfg, clock=clock)
    try:
        remote = {s.base_offset: s for s in log._segments if isinstance(s, RemoteSegment)}
        assert len(remote) >= 8
        records = log.fetch(None, max_records=page).records
        holding = {log._segments.segment_for(r.offset).base_offset for r in records}
        indexed = {base for base, s in remote.items() if s._indexes}
        assert indexed == holding
    finally:
        log.close()
