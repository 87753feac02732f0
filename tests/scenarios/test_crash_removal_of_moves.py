"""Every path that physically removes a record a reschedule cancelled (compaction of
cancelled records, compaction by age, retention) against a power loss while the copy is
not yet fsynced (the default flush policy): after the crash, exactly one of the original
and its copy is ever delivered, at every file operation in the torn model (every third in
the power model).

Removing the original makes the cancellation durable; it stands for the copy, so the copy
must be durable first. And the crash-point injector itself: a file that takes the inode
number of one the model remembers must not take over its bytes after the reboot."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest

from kdelay import Log, LogConfig, Record
from kdelay.testing.faults import FaultInjector, SimulatedCrash, close_abandoned
from kdelay.testing.seeds import stable_seed

T0 = 1_700_000_000_000
HOUR = 3_600_000
CFG = LogConfig(segment_bytes=700, index_interval_bytes=64, compaction_min_ratio=0.3,
                retention_ms=HOUR)


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


def _batches() -> list[tuple[int, int]]:
    """(records, delay) of each batch: single records and 3-record batches, all due within
    a few seconds, so that the rescheduled originals fall due long before their copies."""
    return [(3 if i % 4 == 1 else 1, 1000 + 37 * i) for i in range(20)]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[str, int]:
    path = os.fspath(tmp_path_factory.mktemp("tpl") / "p")
    with Log.open(path, config=CFG, clock=Clock()) as log:
        for i, (n, delay) in enumerate(_batches()):
            log.append([Record(b"v%02d.%d" % (i, j) + b"." * 20) for j in range(n)],
                       delay_ms=delay)
        log.roll()
        return path, log.log_end_offset


# records cancelled, records rescheduled (each to the far future), as offsets
CANCELLED = [0, 4, 7, 11, 13, 14, 15, 16, 17, 23]
MOVED = [1, 9, 12]


def _removals() -> dict[str, Callable[[Log, Clock], object]]:
    def compact_cancelled(log: Log, clock: Clock) -> None:
        assert log.compact().segments_rewritten

    def compact_by_age(log: Log, clock: Clock) -> None:
        clock.t += 2 * HOUR  # every original is due for longer than retention_ms
        assert log.compact().segments_rewritten

    def retention(log: Log, clock: Clock) -> None:
        clock.t += 2 * HOUR
        assert log.enforce_retention()

    return {"compact_cancelled": compact_cancelled, "compact_by_age": compact_by_age,
            "retention": retention}


def _run(directory: str, removal, crash_at: int | None, mode: str, clock: Clock
         ) -> tuple[FaultInjector, dict[int, int]]:
    copies: dict[int, int] = {}
    log = None
    with FaultInjector([directory], crash_at=crash_at,
                       seed=stable_seed("moves", crash_at, mode)) as files:
        try:
            log = Log.open(directory, config=CFG, clock=clock)
            log.cancel(CANCELLED)
            for offset in MOVED:
                copies[offset] = log.reschedule(offset, delay_ms=100 * HOUR).base_offset
            removal(log, clock)
            log.close()
        except SimulatedCrash:
            pass
    if log is not None and not log._closed:
        close_abandoned(log)
    return files, copies


@pytest.mark.parametrize("removal", list(_removals()))
def test_a_crash_while_a_moved_record_is_removed_keeps_exactly_one(tmp_path, template,
                                                                  removal):
    src, end = template
    remove = _removals()[removal]
    clean = os.fspath(tmp_path / "clean")
    shutil.copytree(src, clean)
    files, _ = _run(clean, remove, None, "power", Clock())
    operations = len(files.ops)
    for mode, step in (("torn", 1), ("power", 3)):  # (the torn model reaches the most)
        for crash_at in range(0, operations, step):
            directory = os.fspath(tmp_path / f"{mode}-{crash_at}")
            shutil.copytree(src, directory)
            clock = Clock()
            files, copies = _run(directory, remove, crash_at, mode, clock)
            assert files.crashed
            files.apply_crash(mode)
            clock.t = T0 + 1000 * HOUR  # everything due
            with Log.open(directory, config=CFG, clock=clock) as log:
                got = [r.offset for r in log.fetch(None, max_records=10_000).records]
            for original in MOVED:
                copy = copies.get(original, end + MOVED.index(original))
                where = f"{removal}: crash ({mode}) at {files.ops[crash_at]}"
                assert (original in got) + (copy in got) == 1, (
                    f"{where}: original {original} {'in' if original in got else 'not in'}"
                    f" the log, copy {copy} {'in' if copy in got else 'not in'}")
            assert len(got) == len(set(got))
            shutil.rmtree(directory)


def test_a_reused_inode_does_not_take_over_remembered_bytes(tmp_path):
    """A durable file renamed over (its inode freed) and a new file created and fsync'd
    after it: the reboot brings the first file back with its own bytes."""
    from kdelay import fsio

    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "a").write_bytes(b"A" * 100)
    (directory / "b").write_bytes(b"B" * 100)
    with FaultInjector([os.fspath(directory)], crash_at=None) as files:
        # "a" is replaced (its inode leaves the namespace), then new files are written and
        # fsync'd: without pinning, the filesystem hands the freed number to one of them
        fsio.rename(os.fspath(directory / "b"), os.fspath(directory / "a"))
        for i in range(20):
            fd = fsio.open_append(os.fspath(directory / f"n{i}"))
            fsio.write(fd, b"N" * 50, 0)
            fsio.fsync(fd)
            os.close(fd)
        files.crashed = True  # the machine dies here, before any directory fsync
    files.apply_crash("power")
    assert sorted(os.listdir(directory)) == ["a", "b"]
    assert (directory / "a").read_bytes() == b"A" * 100
    assert (directory / "b").read_bytes() == b"B" * 100
