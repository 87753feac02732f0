"""Log.sync_remote and the background sync (kdelay/log/tiered/sync.py): copies of sealed
segments, metrics()["remote"], retention of the whole log over remote copies (the
deletion protocol), orphans, an unreachable store."""

from __future__ import annotations

import os
import time

import pytest

from kdelay import Log, LogConfig, Record, RemoteStorageError, RemoteSyncResult
from kdelay.log.segments.layout import (
    LOG_SUFFIX,
    REMOTE_DELETING_SUFFIX,
    REMOTE_SUFFIX,
    segment_file,
)
from kdelay.log.tiered import manifest
from kdelay.log.tiered.tier import read_settings
from kdelay.testing.store_faults import StoreFaults

SMALL = dict(segment_bytes=2048, index_interval_bytes=128)


def fill(log: Log, n: int = 60, start: int = 0) -> None:
    for i in range(start, start + n):
        log.append([Record(b"v%04d" % i + b"x" * 100)], delay_ms=5)


def everything(log: Log) -> list[tuple[int, bytes]]:
    out, offset = [], log.log_start_offset
    while batch := log.read(offset, max_records=1000):
        out += [(r.offset, r.value) for r in batch]
        offset = batch[-1].offset + 1
    return out


def store_bases(log: Log) -> set[int]:
    listing = log._maintenance.remote.tier.store.list()
    return {manifest.parse_object_name(n)[0] for n in listing
            if n.endswith(manifest.MANIFEST_SUFFIX)}


@pytest.fixture
def open_log(tmp_path, remote, clock):
    logs = []

    def opener(**fields) -> Log:
        log = Log.open(os.fspath(tmp_path / "p-0"), config=remote.config(**{**SMALL, **fields}),
                       clock=clock)
        logs.append(log)
        return log

    yield opener
    for log in logs:
        log.close()


def test_sync_copies_every_sealed_segment_and_reports_it(open_log, remote, no_background_sync):
    log = open_log()
    fill(log)
    before = everything(log)
    sealed = log.segments[:-1]
    result = log.sync_remote()
    assert result.copied == len(sealed)
    assert log.sync_remote() == RemoteSyncResult()  # nothing left to do
    assert store_bases(log) == set(sealed)
    for base in sealed:
        assert os.path.exists(segment_file(log.path, base, REMOTE_SUFFIX))
    m = log.metrics()["remote"]
    assert m["copies_pending"] == 0 and m["segments_remote"] == len(sealed)
    assert m["segments_local"] == len(log.segments)  # copied, and still local
    assert m["bytes_remote"] == sum(log._segments[b].size for b in sealed)
    assert m["requests"] > 0 and m["last_error"] is None
    assert everything(log) == before
    assert read_settings(log.path) == (remote.url, {k: v for k, v in remote.options.items()
                                                    if "key" not in k})


def test_the_background_sync_copies_after_a_roll(open_log):
    log = open_log()
    fill(log, 10)
    log.roll()
    deadline = time.monotonic() + 20
    while log.metrics()["remote"]["copies_pending"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.metrics()["remote"]["copies_pending"] == 0
    assert store_bases(log) == set(log.segments[:-1])


def test_retention_deletes_remote_copies_manifest_first(open_log, clock):
    log = open_log(retention_ms=1000)
    fill(log)
    log.sync_remote()
    sealed = log.segments[:-1]
    clock.advance(10_000)
    deleted = log.enforce_retention()
    assert deleted == len(sealed)
    for base in sealed:  # never served again; the remote copy goes with the next sync
        assert not os.path.exists(segment_file(log.path, base, REMOTE_SUFFIX))
        assert not os.path.exists(segment_file(log.path, base, LOG_SUFFIX))
    log.sync_remote()  # (or the background sync, woken by retention)
    assert store_bases(log) == set()
    assert log._maintenance.remote.tier.store.list() == {}
    assert not any(n.endswith(REMOTE_DELETING_SUFFIX) for n in os.listdir(log.path))


def test_retention_counts_remote_bytes(open_log, clock):
    log = open_log(retention_bytes=3000)
    fill(log)
    log.sync_remote()
    clock.advance(10)
    log.enforce_retention()
    assert sum(log._segments[b].size for b in log.segments) <= 3000 + 2048


def test_an_interrupted_remote_deletion_is_finished_by_open_and_sync(tmp_path, remote, clock):
    path = os.fspath(tmp_path / "p-0")
    cfg = remote.config(retention_ms=1000, **SMALL)
    log = Log.open(path, config=cfg, clock=clock)
    fill(log)
    log.sync_remote()
    first = log.segments[0]
    log.close()
    # a crash right after retention renamed the marker: the .log is still there
    os.rename(segment_file(path, first, REMOTE_SUFFIX),
              segment_file(path, first, REMOTE_DELETING_SUFFIX))
    log = Log.open(path, config=cfg, clock=clock)
    try:
        assert log.log_start_offset > first  # never served again
        assert not os.path.exists(segment_file(path, first, LOG_SUFFIX))
        log.sync_remote()
        assert first not in store_bases(log)
        assert not os.path.exists(segment_file(path, first, REMOTE_DELETING_SUFFIX))
    finally:
        log.close()


def test_orphans_of_an_interrupted_copy_are_swept_by_a_later_sync(tmp_path, remote, clock):
    path = os.fspath(tmp_path / "p-0")
    cfg = remote.config(**SMALL)
    log = Log.open(path, config=cfg, clock=clock)
    fill(log)
    store = log._maintenance.remote.tier.store
    store.put(f"{log.segments[0]:020d}.00000000000000aa.log", b"part of a copy")
    log.close()
    log = Log.open(path, config=cfg, clock=clock)
    try:
        log.sync_remote()
        assert f"{log.segments[0]:020d}.00000000000000aa.log" not in store.list()
    finally:
        log.close()


def test_an_unreachable_store_keeps_everything_local(open_log, clock):
    log = open_log(local_retention_bytes=0)  # (an empty directory opens only with the store)
    with StoreFaults(unreachable=True):
        fill(log, 30)
        with pytest.raises(RemoteStorageError):
            log.sync_remote()
        fill(log, 30, start=30)  # appends go on
        m = log.metrics()["remote"]
        assert m["copies_pending"] == len(log.segments) - 1 > 0
        assert "unreachable" in m["last_error"]
        assert m["segments_remote"] == 0 and m["bytes_remote"] == 0
        assert [v for _, v in everything(log)] == [b"v%04d" % i + b"x" * 100
                                                     for i in range(60)]
    log.sync_remote()  # the store is back
    assert log.metrics()["remote"]["copies_pending"] == 0
    assert log.metrics()["remote"]["last_error"] is None


def test_compaction_leaves_copied_segments_alone(open_log, clock):
    log = open_log(retention_ms=1000, compaction_min_ratio=0.1)
    fill(log)
    log.sync_remote()
    copied = {b: log._segments[b].remote for b in log.segments[:-1]}
    log.cancel(range(0, 60, 2))
    assert log.compact().segments_rewritten == 0
    assert {b: log._segments[b].remote for b in log.segments[:-1]} == copied


def test_sync_remote_without_remote_storage_does_nothing(tmp_path):
    with Log.open(os.fspath(tmp_path / "p"), config=LogConfig()) as log:
        assert log.sync_remote() == RemoteSyncResult()
        assert "remote" not in log.metrics()


# ---------------------------------------------------------------------------- local retention


def local_logs(log: Log) -> list[int]:
    return sorted(b for b in log.segments
                  if os.path.exists(segment_file(log.path, b, LOG_SUFFIX)))


def test_local_retention_by_bytes_keeps_the_newest_local(open_log):
    log = open_log(local_retention_bytes=4096)
    fill(log, 120)
    log.cancel([3])  # a remote-only segment keeps its cancellations locally
    before = everything(log)
    log.sync_remote()
    sealed = log.segments[:-1]
    local_sealed = [b for b in local_logs(log) if b != log.segments[-1]]
    assert sum(log._segments[b].size for b in local_sealed) <= 4096
    assert local_sealed == sealed[len(sealed) - len(local_sealed):]  # the newest stay
    gone = [b for b in sealed if b not in local_sealed]
    assert gone
    for base in gone:
        assert os.path.exists(segment_file(log.path, base, REMOTE_SUFFIX))
        assert not any(n.startswith(f"{base:020d}.") and n.endswith(("index", ".log"))
                       for n in os.listdir(log.path))
    assert os.path.exists(segment_file(log.path, 0, ".cancels"))
    assert everything(log) == before
    m = log.metrics()["remote"]
    assert m["segments_local"] == len(log.segments) - len(gone)
    assert log.sync_remote().local_deleted == 0  # nothing more to do


def test_local_retention_by_time_waits_for_the_last_record_to_come_due(open_log, clock,
                                                                        no_background_sync):
    # (a background pass, woken by the rolls, could run after the clock moves and take
    # the deletions this pass is to count)
    log = open_log(local_retention_ms=1000)
    fill(log, 60)
    log.sync_remote()
    assert local_logs(log) == log.segments  # nothing due long enough yet
    clock.advance(2000)
    result = log.sync_remote()
    assert result.local_deleted == len(log.segments) - 1
    assert local_logs(log) == [log.segments[-1]]


def test_nothing_local_goes_while_the_store_is_down(open_log):
    log = open_log(local_retention_bytes=0)
    fill(log, 60)
    log.sync_remote()
    with StoreFaults(unreachable=True):
        fill(log, 60, start=60)
        before = local_logs(log)
        with pytest.raises(RemoteStorageError):
            log.sync_remote()
        assert local_logs(log) == before
    log.sync_remote()
    assert local_logs(log) == [log.segments[-1]]


def test_remote_only_segments_are_deleted_by_retention_of_the_whole_log(open_log, clock):
    log = open_log(local_retention_bytes=0, retention_ms=1000)
    fill(log, 60)
    log.sync_remote()
    clock.advance(5000)
    sealed = len(log.segments) - 1
    assert log.enforce_retention() == sealed > 0
    log.sync_remote()
    assert log._maintenance.remote.tier.store.list() == {}
    assert log.segments == [log.log_start_offset]  # only the active segment is left
