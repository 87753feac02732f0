"""Retention and compaction at every moment a sync pass lets go of the log's lock: a
segment deleted (or rewritten) while its copy finishes must not come back. Its `N.remote`
and its copy in the store would otherwise survive, and the next open would move the log
start backwards and serve records retention had deleted.

Deterministic: the sync's view of the log's lock is wrapped so that every time the pass
releases it, retention of the whole log (with compaction) runs in that very gap, as
another thread could. And the same class beside it: a segment whose `N.remote` is damaged
(treated as not copied) deleted by retention must not come back from the store either."""

from __future__ import annotations

import os

import pytest

from kdelay import Log, Record
from kdelay.log.segments.layout import LOG_SUFFIX, REMOTE_SUFFIX, segment_file

pytestmark = pytest.mark.usefixtures("no_background_sync")

SMALL = dict(segment_bytes=1024, index_interval_bytes=128, retention_ms=1000)


class RetentionInEveryGap:
    """Stands for the log's lock in the sync: every release by the pass (the outermost
    one) is followed at once by `log.enforce_retention()`, in the same thread."""

    def __init__(self, log: Log):
        self._lock = log._lock
        self._log = log
        self._depth = 0
        self._running = False
        self.runs = 0

    def __enter__(self):
        self._lock.acquire()
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        self._lock.release()
        if self._depth == 0 and not self._running and not exc[0]:
            self._running = True
            try:
                self._log.enforce_retention()
                self.runs += 1
            finally:
                self._running = False


def _values(log: Log) -> dict[int, bytes]:
    out, offset = {}, log.log_start_offset
    while batch := log.read(offset, max_records=1000):
        out.update((r.offset, r.value) for r in batch)
        offset = batch[-1].offset + 1
    return out


@pytest.mark.parametrize("compaction", [0.0, 0.5])
def test_retention_in_every_gap_of_a_copy_brings_nothing_back(tmp_path, remote, clock,
                                                             compaction):
    directory = os.fspath(tmp_path / "p-0")
    config = remote.config(**SMALL, compaction_min_ratio=compaction)
    with Log.open(directory, config=config, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=5)
        log.roll()
        clock.advance(10_000)  # everything due for longer than retention_ms
        gaps = RetentionInEveryGap(log)
        log._maintenance.remote._lock = gaps
        log.sync_remote()
        log.sync_remote()  # the remote deletions retention gave up
        assert gaps.runs
        start, held = log.log_start_offset, _values(log)
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.log_start_offset == start, "the log start moved backwards"
        assert _values(log) == held
        log.sync_remote()
        for base in log.segments:
            remote_marker = segment_file(directory, base, REMOTE_SUFFIX)
            assert base >= start
            assert not os.path.exists(remote_marker) or log._segments[base].remote


def test_a_segment_with_a_damaged_marker_deleted_by_retention_stays_deleted(
        tmp_path, remote, clock):
    directory = os.fspath(tmp_path / "p-0")
    config = remote.config(**SMALL)
    with Log.open(directory, config=config, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=10**6 if i > 30 else 5)
        log.roll()
        log.sync_remote()
        first = log.segments[0]
    with open(segment_file(directory, first, REMOTE_SUFFIX), "r+b") as f:
        f.write(b"XXXX")  # damaged: the open treats the segment as not copied
    clock.advance(10_000)
    with Log.open(directory, config=config, clock=clock) as log:
        assert any("it will be copied again" in p for p in log.load_report.problems)
        assert log._segments[first].remote is None
        assert log.enforce_retention() >= 1
        assert not os.path.exists(segment_file(directory, first, LOG_SUFFIX))
        start = log.log_start_offset
        log.sync_remote()
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.log_start_offset == start, "a deleted segment came back from the store"
