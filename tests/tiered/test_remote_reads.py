
"""A log whose sealed segments are held remotely reads exactly as the same log all local:
fetch in due order (pages of several sizes, the clock moving), read by offset, Consumer,
metrics' counts; each remote byte fetched at most once per drain while cached; cancels of
remote-only records survive a restart; an empty directory serves the copied history; an
unreachable store fails only the reads that need it."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import FakeClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Consumer, Log, LogConfig, Record, RemoteStorageError
from kdelay.log.tiered.remote_segment import RemoteSegment
from kdelay.testing.checks import fetch_everything
from kdelay.testing.tiering import drop_local

FAR = 10**7  # the delay of every tenth batch of `remote_log`: pending throughout
COUNTED = ("log_start_offset", "log_end_offset", "segments", "records", "bytes",
           "pending_records", "due_records", "earliest_pending_deliver_after",
           "cancelled_records")


def _fill(log: Log, delays: list[int]) -> None:
    for i, delay in enumerate(delays):
        log.append([Record(b"v%04d" % i + b"x" * 40, key=b"k%d" % (i % 7))] * (1 + i % 3),
                   delay_ms=delay)


def _copy_sealed(log: Log) -> list[int]:
    """Copy every sealed segment (a sync pass); returns their bases."""
    log.sync_remote()
    return log.segments[:-1]


def _observe(log: Log, clock: FakeClock, pages=(1, 7, 500)) -> dict:
    seen = {"metrics": {k: log.metrics()[k] for k in COUNTED},
            "read": [log.read(o, max_records=50) for o in range(0, log.metrics()[
                "log_end_offset"], 37)]}
    for step in (0, 300, 10_000):
        clock.advance(step)
        seen[f"now+{step}"] = [fetch_everything(log, page) for page in pages]
    return seen


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(delays=st.lists(st.integers(0, 900), min_size=20, max_size=120),
       cancels=st.lists(st.integers(0, 300), max_size=10),
       remote_only=st.lists(st.booleans(), min_size=12, max_size=12),
       compact=st.booleans())
def test_remote_segments_read_as_local(tmp_path_factory, delays, cancels, remote_only,
                                       compact):
    root = tmp_path_factory.mktemp("log")
    directory = os.fspath(root / "p-0")
    # local_retention_ms=-1: the sync keeps local files (the test drops them itself)
    cfg = dict(segment_bytes=1500, index_interval_bytes=200, compaction_min_ratio=0.01,
               retention_ms=100, local_retention_ms=-1)
    url = f"file://{root / 'store'}"
    clock = FakeClock()
    log = Log.open(directory, config=_config(url, **cfg), clock=clock)
    _fill(log, delays)
    end = log.metrics()["log_end_offset"]
    log.cancel(sorted({c for c in cancels if c < end}))
    if compact:
        clock.advance(2000)
        log.compact()
    bases = _copy_sealed(log)
    log.close()
    local_copy = os.fspath(root / "local")
    shutil.copytree(directory, local_copy)
    drop_local(directory, [b for b, drop in zip(bases, remote_only, strict=False) if drop])

    t = clock.t
    log = Log.open(local_copy, config=_config(None, **cfg), clock=clock)
    expected = _observe(log, clock)
    log.close()
    clock.t = t
    log = Log.open(directory, config=_config(url, **cfg), clock=clock)
    assert _observe(log, clock) == expected
    log.close()


def _config(url, **fields):
    return LogConfig(remote_storage=url, **fields)


@pytest.fixture
def remote_log(tmp_path, file_remote, clock):
    """open(**fields) -> a log of 600 records whose sealed segments are all remote-only;
    also returns the records a full drain returns."""
    directory = os.fspath(tmp_path / "p-0")
    logs = []

    def open_(**fields):
        cfg = file_remote.config(segment_bytes=4096, index_interval_bytes=256)
        log = Log.open(directory, config=cfg, clock=clock)
        _fill(log, [(i * 53) % 900 if i % 10 else FAR for i in range(600)])
        clock.advance(1000)
        expected = fetch_everything(log, 10_000)
        bases = _copy_sealed(log)
        log.close()
        drop_local(directory, bases)
        log = Log.open(directory, config=file_remote.config(segment_bytes=4096, **fields),
                       clock=clock)
        logs.append(log)
        return log, expected

    yield open_
    for log in logs:
        log.close()


def test_a_drain_fetches_each_remote_byte_at_most_once(remote_log):
    log, expected = remote_log()
    remote = [s for s in log._segments if isinstance(s, RemoteSegment)]
    assert len(remote) >= 5
    stored = sum(c.remote.stored_bytes for c in remote)
    for page in (3, 50):
        assert fetch_everything(log, page) == expected
    counters = log._tier.counters
    assert counters.bytes_fetched <= stored  # indexes and .log bytes, each once
    m = log.metrics()["remote"]
    assert m["segments_remote"] == len(remote) and m["requests"] == counters.requests


def test_a_cache_smaller_than_the_log_still_reads_right(remote_log):
    log, expected = remote_log(remote_cache_bytes=3000)
    for page in (1, 13, 1000):
        assert fetch_everything(log, page) == expected
    assert log._tier.cache_budget.held <= 3000 + 4096 + 4096


def test_cancel_of_a_remote_only_record_survives_a_restart(remote_log, file_remote, clock):
    log, _ = remote_log()
    victim = next(r.offset for r in log.read(0, max_records=100) if r.deliver_after > clock.t)
    assert isinstance(log._segments.segment_for(victim), RemoteSegment)
    assert log.cancel([victim]) == 1
    path, end = log.path, log.metrics()["log_end_offset"]
    log.close()
    log = Log.open(path, config=file_remote.config(segment_bytes=4096), clock=clock)
    try:
        clock.advance(2 * FAR)
        assert sorted(r.offset for r in fetch_everything(log, 100)) == [
            o for o in range(end) if o != victim]
    finally:
        log.close()


def test_consumer_reads_remote_segments(remote_log):
    log, expected = remote_log()
    consumer = Consumer(log, "g")
    got = []
    while batch := consumer.poll(max_records=64):
        got += batch
        consumer.commit()
    assert [r.offset for r in got] == [r.offset for r in expected]


def test_an_empty_directory_serves_the_copied_history_and_appends_after_it(
        remote_log, file_remote, clock):
    log, expected = remote_log()
    path, end = log.path, log.metrics()["log_end_offset"]
    copied_end = max(s.next_offset for s in log._segments if s.remote is not None)
    log.close()
    shutil.rmtree(path)
    log = Log.open(path, config=file_remote.config(segment_bytes=4096), clock=clock)
    try:
        assert log.log_start_offset == 0 and log.metrics()["log_end_offset"] == copied_end
        assert fetch_everything(log, 100) == [r for r in expected if r.offset < copied_end]
        log.append([Record(b"after")])
        assert log.read(copied_end)[0].value == b"after"
    finally:
        log.close()
    assert copied_end <= end


def test_an_unreachable_store_fails_the_remote_reads_only(tmp_path, file_remote, clock):
    directory = os.fspath(tmp_path / "p-0")
    cfg = file_remote.config(segment_bytes=4096, remote_timeout_ms=2000)
    log = Log.open(directory, config=cfg, clock=clock)
    _fill(log, [0] * 300)
    bases = _copy_sealed(log)
    log.close()
    drop_local(directory, bases[:-1])
    log = Log.open(directory, config=cfg, clock=clock)
    try:
        shutil.rmtree(file_remote.url[len("file://"):])
        with pytest.raises(RemoteStorageError):
            log.read(0)
        assert log._tier.last_error is not None
        local = bases[-1]
        assert log.read(local)[0].offset == local  # a local segment reads on
        log.append([Record(b"still")])
    finally:
        log.close()



def test_an_empty_directory_with_an_unreachable_store_is_refused(tmp_path, clock):
    nobody = LogConfig(remote_storage="s3://kdelay-test/x", remote_timeout_ms=1000,
                       remote_storage_options={"endpoint": "http://127.0.0.1:9",
                                               "region": "us-east-1", "access_key_id": "x",
                                               "secret_access_key": "x", "allow_http": True})
    with pytest.raises(RemoteStorageError):
        Log.open(os.fspath(tmp_path / "p-0"), config=nobody, clock=clock)
