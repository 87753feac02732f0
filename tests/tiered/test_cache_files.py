"""The local cache of remote segments on disk (`<dir>/remote-cache/`): its index files are
bounded with the fetched bytes by remote_cache_bytes (an evicted segment's files go), go
with their segment when retention deletes it, and an open keeps only those of remote-only
segments (charged from the start), removing the rest."""

from __future__ import annotations

import os

from kdelay.log.tiered.manifest import parse_object_name
from kdelay.log.tiered.remote_segment import RemoteSegment
from kdelay.log.tiered.tier import CACHE_DIR
from kdelay.testing.checks import fetch_everything
from tiered import test_remote_reads as reads

remote_log = reads.remote_log  # the fixture: a log whose sealed segments are remote-only
FAR = reads.FAR


def _cached(log) -> dict[str, int]:
    """name -> size of the files in the log's remote-cache/."""
    cache = os.path.join(log.path, CACHE_DIR)
    names = os.listdir(cache) if os.path.isdir(cache) else []
    return {n: os.path.getsize(os.path.join(cache, n)) for n in names}


def _charged_bases(log) -> set[int]:
    return {seg.base_offset for seg, n in log._tier.cache_budget._by_holder.items() if n}


def test_the_cache_files_stay_within_the_bound_across_a_drain(remote_log):
    limit = 8000
    log, expected = remote_log(remote_cache_bytes=limit)
    remote = [s for s in log._segments if isinstance(s, RemoteSegment)]
    assert sum(s.size for s in remote) > 3 * limit  # the log is larger than the cache
    out, cursor, evicted = [], None, False
    while (page := log.fetch(cursor, max_records=20)).records:
        out += page.records
        cursor = page.next
        files = _cached(log)
        assert sum(files.values()) <= limit
        # every file is one of a segment the budget charges: evicted ones took theirs
        assert {parse_object_name(n)[0] for n in files} <= _charged_bases(log)
        evicted |= len(_charged_bases(log)) < len(remote)
    assert out == expected and evicted


def test_retention_takes_the_cache_files_of_the_remote_segments_it_deletes(remote_log,
                                                                           clock):
    log, expected = remote_log(retention_ms=1)
    assert fetch_everything(log, 10_000) == expected
    assert _cached(log)
    clock.advance(2 * FAR)
    assert log.enforce_retention() > 0
    assert not any(isinstance(s, RemoteSegment) for s in log._segments)
    assert _cached(log) == {}


def test_an_open_keeps_the_files_of_remote_only_segments_and_removes_the_rest(
        remote_log, file_remote, clock):
    log, expected = remote_log()
    assert fetch_everything(log, 10_000) == expected
    kept = _cached(log)
    assert kept
    path = log.path
    log.close()
    cache = os.path.join(path, CACHE_DIR)
    for stale in ("00000000000000000000.0123456789abcdef.dlyindex", "tmpx1y2.chunks"):
        with open(os.path.join(cache, stale), "wb") as f:
            f.write(b"left over")
    reopened = type(log).open(path, config=file_remote.config(segment_bytes=4096),
                              clock=clock)
    try:
        assert _cached(reopened) == kept
        assert reopened._tier.cache_budget.held == sum(kept.values())
        requests = reopened._tier.counters.requests
        assert fetch_everything(reopened, 10_000) == expected
        fetched = reopened._tier.counters.requests - requests
        assert fetched == len([s for s in reopened._segments
                               if isinstance(s, RemoteSegment)])  # .log bytes only
    finally:
        reopened.close()
