"""A crash at every file and store operation of a sync that exports cancellations (and the
cancels and the reschedule before it), in each crash model (every operation in the
torn one, every third in the others): after the directory recovers
and a sync completes, losing the local disk and restoring from the store gives back
exactly the records the recovered directory delivers in the copied range: no cancelled
record, no rescheduled original, and nothing cancelled that the directory lost."""

from __future__ import annotations

import os
import shutil

import pytest

from kdelay import Log, Record
from kdelay.testing.checks import fetch_everything
from kdelay.testing.faults import CRASH_MODES, FaultInjector
from kdelay.testing.store_faults import StoreFaults, crash_during

pytestmark = pytest.mark.usefixtures("no_background_sync")

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)


def _protocol(log: Log) -> None:
    log.cancel([2, 11])
    log.reschedule(20, delay_ms=10**7)  # its copy is in the active segment
    log.sync_remote()
    log.cancel([3])
    log.sync_remote()


def _delivered(directory: str, config, clock, end: int) -> set[int]:
    with Log.open(directory, config=config, clock=clock) as log:
        log.sync_remote()
        t = clock.t
        clock.t += 10**9
        try:
            return {r.offset for r in fetch_everything(log, 500) if r.offset < end}
        finally:
            clock.t = t


def test_a_crash_anywhere_in_an_export_never_lets_the_store_disagree(tmp_path, file_remote,
                                                                     clock):
    config = file_remote.config(**CONFIG)
    store_dir = file_remote.url[len("file://"):]
    template = os.fspath(tmp_path / "template" / "p-0")  # (the store keys by this name)
    with Log.open(template, config=config, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=10**6 + i)
        log.roll()
        log.sync_remote()
        end = log.segments[-1]  # the copied range is [0, end)
    shutil.copytree(store_dir, os.fspath(tmp_path / "template-store"))
    t0 = clock.t

    def fresh() -> str:
        directory = os.fspath(tmp_path / "p-0")
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(template, directory)
        shutil.rmtree(store_dir)
        shutil.copytree(os.fspath(tmp_path / "template-store"), store_dir)
        clock.t = t0
        return directory

    directory = fresh()
    with FaultInjector([directory]) as files, StoreFaults(files=files), \
            Log.open(directory, config=config, clock=clock) as log:
        _protocol(log)
    operations = len(files.ops)
    assert sum(op == "store.put" for op, _ in files.ops) >= 2

    for mode in CRASH_MODES:  # every operation in the torn model, every third in the others
        for crash_at in range(0, operations, 1 if mode == "torn" else 3):
            directory = fresh()
            crashed = crash_during(directory, crash_at, mode, lambda path: Log.open(
                path, config=config, clock=clock), _protocol)
            here = _delivered(directory, config, clock, end)  # recovered, then synced
            shutil.rmtree(directory)  # the local disk is lost
            restored = _delivered(directory, config, clock, end)
            assert restored == here, (f"crash ({mode}) at {crash_at} {crashed}: store "
                                      f"{sorted(restored ^ here)} differ")
            assert {2, 11, 3} & here == {2, 11, 3} & restored
