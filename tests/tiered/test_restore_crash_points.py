"""Crash at every file and store operation of a restore: an open that adopts the store's
committed copies (one list, a get per manifest and `.cancelled` object, the journals and
`N.remote` markers written) and appends after them, into an empty directory and into a
partly lost one (local segments for the newest offsets, the oldest markers gone). In each
crash mode, the directory then reopens with the store up and holds the whole copied
history: every record once in offset and in due order, the cancelled ones still
cancelled, appends after the last copied offset, every `N.remote` its manifest; a second
open finds nothing to repair. A restore never writes to the store."""

from __future__ import annotations

import os
import shutil

import pytest

from kdelay import Log, Record
from kdelay.log.segments.layout import REMOTE_SUFFIX, segment_file
from kdelay.testing.checks import files_under
from kdelay.testing.faults import CRASH_MODES, FaultInjector
from kdelay.testing.store_faults import StoreFaults, crash_during
from kdelay.testing.tiering import check_restored, tiered_history

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)
RECORDS = 30  # 4 copied segments


def _lose_oldest(directory: str, bases: list[int]) -> None:
    """A partly lost directory: the newest copied segments still local, the markers of
    the oldest remote-only ones gone (their cancellation journals kept)."""
    for base in bases:
        os.unlink(segment_file(directory, base, REMOTE_SUFFIX))


@pytest.mark.parametrize("lost", ["empty", "partly"])
def test_a_crash_at_any_operation_of_a_restore_loses_nothing(
        tmp_path, file_remote, clock, no_background_sync, lost):
    template = os.fspath(tmp_path / "template" / "p-0")  # the store keys by this name
    config = file_remote.config(**CONFIG)
    # partly: the 3 oldest of the 4 copied segments remote-only, the newest still local
    history = tiered_history(template, config, clock, RECORDS,
                             remote_only=None if lost == "empty" else 3)
    clock.advance(10**6)  # everything due: a drain returns every record not cancelled
    bases = sorted(int(n[:20]) for n in os.listdir(template) if n.endswith(REMOTE_SUFFIX))
    if lost == "empty":
        shutil.rmtree(template)
        os.makedirs(template)
    else:
        _lose_oldest(template, bases[:2])
    # what the open appends; the partly lost directory also holds its uncopied tail
    kept = {} if lost == "empty" else {o: v for o, (v, _) in history.local.items()}
    appended = {**kept, history.end + len(kept): b"appended"}
    store = file_remote.url[len("file://"):]
    stored = files_under(store)

    def fresh() -> str:
        directory = os.fspath(tmp_path / "p-0")  # the template's name: its copies
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(template, directory)
        return directory

    def append(log: Log) -> None:
        log.append([Record(b"appended")])

    directory = fresh()
    with FaultInjector([directory]) as files, StoreFaults(files=files), \
            Log.open(directory, config=config, clock=clock) as log:
        append(log)
    operations = len(files.ops)
    assert [op for op, _ in files.ops].count("store.list") == 1
    assert any(op == "store.get" for op, _ in files.ops)

    trials = 0
    for mode in CRASH_MODES:
        for crash_at in range(0, operations, 1 if mode == "process" else 3):
            directory = fresh()
            crashed = crash_during(directory, crash_at, mode, lambda path: Log.open(
                path, config=config, clock=clock), append)
            trials += 1
            where = f"crash in mode {mode} before operation {crash_at} {crashed}"
            try:
                with Log.open(directory, config=config, clock=clock) as log:
                    check_restored(log, history, appended, must_have=set(kept))
                with Log.open(directory, config=config, clock=clock) as log:
                    assert log.load_report.problems == [] and \
                        log.load_report.orphans_removed == 0, log.load_report
                assert files_under(store) == stored, "a restore wrote to the store"
            except AssertionError as e:
                raise AssertionError(f"{where}: {e}") from e
    assert trials > operations
