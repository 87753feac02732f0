"""Restoring a partly lost directory: the markers of its oldest remote-only segments gone,
with or without their cancellation files. The open adopts the copies below its first
segment; a journal still in the directory is kept (it holds the cancellations made since
the copy), a lost one is rebuilt from the copy's `.cancelled` object. And the restore
check itself fails on a log that differs from the history."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from kdelay import Log
from kdelay.log.segments.layout import (
    CANCEL_INDEX_SUFFIX,
    CANCELS_SUFFIX,
    REMOTE_SUFFIX,
    segment_file,
)
from kdelay.testing.tiering import check_restored, tiered_history

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)


@pytest.fixture
def restored(tmp_path, file_remote, clock):
    """(directory, config, history) of a log of 30 records, all 4 copied segments
    remote-only, the clock still before every deliverAfter."""
    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(**CONFIG)
    return directory, config, tiered_history(directory, config, clock, 30)


def _lose(directory: str, base: int, *suffixes: str) -> None:
    for suffix in suffixes:
        os.unlink(segment_file(directory, base, suffix))


def test_a_kept_journal_keeps_the_cancellations_made_after_the_copy(restored, clock):
    directory, config, history = restored
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.cancel([1]) == 1  # segment 0 is remote-only: its journal is local
    # the marker and the journal's cache are lost: only the journal knows of offset 1
    _lose(directory, 0, REMOTE_SUFFIX, CANCEL_INDEX_SUFFIX)
    clock.advance(10**6)
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.load_report.problems == []
        check_restored(log, replace(history, cancelled=history.cancelled | {1}),
                       {o: v for o, (v, _) in history.local.items()})


def test_lost_cancellation_files_are_rebuilt_from_the_copy(restored, clock):
    directory, config, history = restored
    _lose(directory, 0, REMOTE_SUFFIX, CANCELS_SUFFIX, CANCEL_INDEX_SUFFIX)
    clock.advance(10**6)
    with Log.open(directory, config=config, clock=clock) as log:
        assert 3 in history.cancelled and log.segments[0] == 0
        check_restored(log, history, {o: v for o, (v, _) in history.local.items()})


def test_the_restore_check_fails_on_a_log_unlike_the_history(restored, clock):
    directory, config, history = restored
    clock.advance(10**6)
    local = {o: v for o, (v, _) in history.local.items()}
    with Log.open(directory, config=config, clock=clock) as log:
        with pytest.raises(AssertionError):  # a cancelled record delivered
            check_restored(log, replace(history, cancelled=history.cancelled - {3}), local)
        with pytest.raises(AssertionError):  # a record with other bytes
            check_restored(log, replace(history, records={**history.records,
                                                          5: (b"other", 0)}), local)
        with pytest.raises(AssertionError):  # records the directory should not hold
            check_restored(log, history)
