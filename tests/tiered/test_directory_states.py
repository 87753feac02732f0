"""A tiered directory as its readers find it: the offline listing (CLI, Spark) and the
loader agree on which segments exist; a directory with remote-only segments opened without
its store is refused, naming the store; a damaged `N.remote` marker is restored from the
store or reported and copied again; a damaged `N.manifest` is named on read and by
`kdelay verify --remote`."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
from conftest import run_cli

from kdelay import CorruptLogError, Log, LogConfig, QueueConsumer, Record, RemoteStorageError
from kdelay.log.segments.layout import (
    LOG_SUFFIX,
    REMOTE_DELETING_SUFFIX,
    REMOTE_SUFFIX,
    segment_file,
)
from kdelay.log.tiered import inventory
from kdelay.log.tiered.manifest import manifest_name
from kdelay.log.tiered.remote_marker import read_remote_marker
from kdelay.log.tiered.remote_segment import RemoteSegment
from kdelay.log.tiered.tier import CACHE_DIR, RemoteTier
from kdelay.testing.tiering import drop_local, tier_out

# nothing local is dropped by the Log's own sync behind the test's back
KEEP_LOCAL = {"local_retention_ms": -1, "local_retention_bytes": -1}
COUNTED = ("segments", "records", "bytes", "pending_records", "due_records",
           "earliest_pending_deliver_after")
PLACEMENT = ("segments_local", "segments_remote", "bytes_local", "bytes_remote",
             "copies_pending")


@pytest.fixture
def tiered(tmp_path, file_remote, clock):
    """A closed log of eight or more sealed segments, every one copied to a file:// store;
    none dropped locally yet. Returns (path, config, sealed bases, records)."""
    path = os.fspath(tmp_path / "p-0")
    cfg = file_remote.config(segment_bytes=2048, **KEEP_LOCAL)
    with Log.open(path, config=LogConfig(segment_bytes=2048), clock=clock) as log:
        for i in range(160):
            log.append([Record(b"v%03d" % i + b"x" * 60)], delay_ms=(i * 37) % 500)
        records = log.read(0, max_records=1000)
    bases = tier_out(path, cfg, remote_only=0)
    assert len(bases) >= 8
    return path, cfg, bases, records


def _rename(path: str, base: int, old: str, new: str) -> None:
    os.rename(segment_file(path, base, old), segment_file(path, base, new))


def test_offline_listing_agrees_with_the_loader(tiered, clock):
    path, cfg, bases, _ = tiered
    # the oldest two being deleted by retention (one local .log left by a crash), two
    # remote-only, the rest copied and local but the last sealed one (its marker never
    # written: a crash before the copy's last step), and the active one
    drop_local(path, bases[1:4])
    for base in bases[:2]:
        _rename(path, base, REMOTE_SUFFIX, REMOTE_DELETING_SUFFIX)
    os.unlink(segment_file(path, bases[-1], REMOTE_SUFFIX))
    listed = inventory.list_all_segments(path)
    assert [s.base_offset for s in listed][:3] == [bases[2], bases[3], bases[4]]
    with Log.open(path, config=cfg, clock=clock) as log:
        loaded = list(log._segments)
        assert [s.base_offset for s in listed] == [s.base_offset for s in loaded]
        assert [s.remote_only for s in listed] == [isinstance(s, RemoteSegment)
                                                    for s in loaded]
        assert [s.remote for s in listed] == [s.remote for s in loaded]
        assert log.log_start_offset == bases[2]


def test_open_without_remote_storage_names_the_store(tiered, clock):
    path, cfg, bases, _ = tiered
    drop_local(path, bases[:2])
    with pytest.raises(RemoteStorageError) as e:
        Log.open(path, config=LogConfig(segment_bytes=2048), clock=clock)
    assert cfg.remote_storage in str(e.value) and "remote_storage=" in str(e.value)
    assert str(bases[0]) in str(e.value)


def test_a_damaged_marker_of_a_remote_only_segment_is_restored_from_the_store(tiered, clock):
    path, cfg, bases, records = tiered
    drop_local(path, bases[:3])
    marker = pathlib.Path(segment_file(path, bases[1], REMOTE_SUFFIX))
    good = marker.read_bytes()
    marker.write_bytes(good[:-5] + b"XXXX\n")
    with Log.open(path, config=cfg, clock=clock) as log:
        assert isinstance(log._segments.segment_for(bases[1]), RemoteSegment)
        assert log.read(0, max_records=1000) == records
    assert marker.read_bytes() == good


def test_a_damaged_marker_of_a_local_segment_is_reported_and_copied_again(tiered, clock,
                                                                         no_background_sync):
    path, cfg, bases, _ = tiered
    marker = pathlib.Path(segment_file(path, bases[2], REMOTE_SUFFIX))
    good = marker.read_bytes()
    marker.write_bytes(b"garbage")
    with Log.open(path, config=cfg, clock=clock) as log:
        assert any(f"segment {bases[2]}" in p for p in log.load_report.problems)
        assert log._segments.segment_for(bases[2]).remote is None
        assert log.sync_remote().copied == 1  # the store's committed copy, adopted
        assert log._segments.segment_for(bases[2]).remote == read_remote_marker(path,
                                                                                 bases[2])
    assert marker.read_bytes() == good


def test_a_damaged_manifest_is_named_on_read_and_by_verify(tiered, clock):
    path, cfg, bases, _ = tiered
    drop_local(path, bases[:1])
    store = RemoteTier(path, cfg).store
    name = manifest_name(bases[0])
    # (not hex digits: any digits could be the checksum's own, the copy id being random)
    store.put(name, store.get(name)[:-3] + b"zz\n")
    rc, out, _ = run_cli("verify", "--remote", "--json", path)
    problems = [f for f in json.loads(out)["partitions"][0]["findings"]
                if f["severity"] == "problem"]
    assert rc == 1
    assert any(f["path"] == store.describe(name) and "damaged" in f["message"]
               for f in problems), problems
    # the local marker is damaged too: the open must read the manifest, and names it
    pathlib.Path(segment_file(path, bases[0], REMOTE_SUFFIX)).write_bytes(b"garbage")
    with pytest.raises(CorruptLogError) as e:
        Log.open(path, config=cfg, clock=clock)
    assert e.value.path == store.describe(name)
    assert os.path.exists(segment_file(path, bases[1], LOG_SUFFIX))


def test_stats_and_metrics_count_the_segments_alike(tiered, clock):
    path, cfg, bases, _ = tiered
    drop_local(path, bases[:3])
    os.unlink(segment_file(path, bases[-1], REMOTE_SUFFIX))  # one sealed segment not copied
    with Log.open(path, config=cfg, clock=clock) as log:
        live = log.metrics()["remote"]
    rc, out, _ = run_cli("stats", "--json", path)
    offline = json.loads(out)["remote"]
    assert rc == 0
    assert live["copies_pending"] == 1 and live["segments_remote"] == len(bases) - 1
    assert {k: offline[k] for k in PLACEMENT} == {k: live[k] for k in PLACEMENT}


def test_metrics_with_the_store_down_come_from_the_cached_indexes(tiered, file_remote, clock):
    path, cfg, bases, _ = tiered
    drop_local(path, bases[:3])
    with Log.open(path, config=cfg, clock=clock) as log:
        before = log.metrics()  # fetches the remote segments' indexes into remote-cache/
    shutil.rmtree(file_remote.url[len("file://"):])
    with Log.open(path, config=cfg, clock=clock) as log:
        after = log.metrics()
        assert {k: after[k] for k in COUNTED} == {k: before[k] for k in COUNTED}
    shutil.rmtree(os.path.join(path, CACHE_DIR))
    # an index never fetched cannot be counted: said, not guessed (and never raised)
    with Log.open(path, config=cfg, clock=clock) as log:
        m = log.metrics()
        assert m["remote"]["segments_uncounted"] == 3 and m["remote"]["last_error"]
        assert m["records"] == before["records"] - sum(
            log._segments[b].next_offset - b for b in bases[:3])


def _queue_run(log: Log, clock, end: int) -> list[tuple[str, int, int]]:
    """A fixed queue scenario: acquire, then ack, release (now and later) and reject in
    turn, until nothing is left once the clock passes `end`; (event, offset, delivery
    count) of every delivery."""
    events = []
    q = QueueConsumer(log, "q", max_delivery_count=3)
    try:
        for _ in range(200):
            got = q.poll(max_records=17)
            if not got:
                if clock.t > end:
                    return events
                clock.advance(250)
                continue
            for i, r in enumerate(got):
                action = ("ack", "release", "later", "reject")[(r.offset + i) % 4]
                events.append((action, r.offset, r.delivery_count))
                if action == "ack":
                    q.ack(r)
                elif action == "release":
                    q.release(r)
                elif action == "later":
                    q.release(r, delay_ms=300)
                else:
                    q.reject(r)
    finally:
        q.close()
    raise AssertionError("the queue did not drain")


def test_a_queue_group_delivers_remote_only_records_as_local_ones(tiered, tmp_path, clock):
    path, cfg, bases, _ = tiered
    local_copy = os.fspath(tmp_path / "all-local" / "p-0")
    shutil.copytree(path, local_copy)  # every segment still local here
    drop_local(path, bases[:5])
    start = clock.t
    with Log.open(local_copy, config=LogConfig(segment_bytes=2048), clock=clock) as log:
        expected = _queue_run(log, clock, start + 2_000)
    clock.t = start
    with Log.open(path, config=cfg, clock=clock) as log:
        assert sum(isinstance(s, RemoteSegment) for s in log._segments) == 5
        got = _queue_run(log, clock, start + 2_000)
    assert got == expected
    assert {e for e, _, _ in expected} == {"ack", "release", "later", "reject"}
    assert any(off < bases[5] for _, off, _ in expected)  # remote-only records delivered
