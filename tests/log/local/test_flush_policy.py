"""The flush policy, observed: fsyncs of the active segment counted through the
durability seam (kdelay.fsio, wrapped by the fault injector, which counts every operation)
for every flush setting."""

from __future__ import annotations

import os
import time
import types

import pytest
from conftest import T0, FakeClock

from kdelay import Log, LogConfig, Record
from kdelay.log.local import flush_policy
from kdelay.log.local.maintenance import Maintenance
from kdelay.log.segments.layout import LOG_SUFFIX, segment_file
from kdelay.testing.faults import FaultInjector

BIG = 1 << 30  # no roll: one segment, whose fsyncs are the policy's (or an explicit flush)


def log_fsyncs(inj: FaultInjector, log: Log) -> int:
    """fsyncs of the log's active segment file the injector has seen so far."""
    active = segment_file(os.path.realpath(log.path), log.segments[-1], LOG_SUFFIX)
    return sum(1 for op, path in inj.ops if op == "fsync" and path == active)


def wait_until(predicate, seconds: float = 10.0) -> bool:
    """Poll `predicate` until it holds or `seconds` pass: generous, so that a slow machine
    only waits longer, never fails a test that would pass."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


@pytest.mark.parametrize("flush_messages, batches, fsyncs_after_each", [
    (None, [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]),   # left to the OS
    (1, [1, 1, 3], [1, 2, 3]),
    (2, [1, 1, 1, 1, 1, 1], [0, 1, 1, 2, 2, 3]),
    (3, [2, 2, 2, 1], [0, 1, 1, 2]),                   # counted in records, not batches
    (4, [9, 1, 1, 1, 1], [1, 1, 1, 1, 2]),             # a batch above the count: at once
])
def test_flush_messages_fsyncs_every_n_records(tmp_path, flush_messages, batches,
                                               fsyncs_after_each):
    config = LogConfig(flush_messages=flush_messages, segment_bytes=BIG)
    with Log.open(tmp_path / "p", config=config, clock=FakeClock()) as log, \
            FaultInjector([str(tmp_path)]) as inj:
        seen = []
        for n in batches:
            log.append([Record(b"v")] * n)
            seen.append(log_fsyncs(inj, log))
        assert seen == fsyncs_after_each
        log.flush()  # an explicit flush always reaches the disk
        assert log_fsyncs(inj, log) == fsyncs_after_each[-1] + 1


def test_cancel_and_reschedule_count_as_records(tmp_path):
    """A reschedule's copy counts as one record, a cancel as the records it took."""
    config = LogConfig(flush_messages=3, segment_bytes=BIG)
    with Log.open(tmp_path / "p", config=config, clock=FakeClock()) as log, \
            FaultInjector([str(tmp_path)]) as inj:
        log.append([Record(b"a"), Record(b"b")], deliver_after=T0 + 10_000)  # 2
        assert log_fsyncs(inj, log) == 0
        log.reschedule(0, T0 + 20_000)                                        # 3
        assert log_fsyncs(inj, log) == 1
        log.append([Record(b"c")], deliver_after=T0 + 10_000)                # 1
        assert log.cancel([1, 3]) == 2                                        # 3
        assert log_fsyncs(inj, log) == 2


def test_flush_ms_fsyncs_the_append_that_finds_the_oldest_overdue(tmp_path, monkeypatch):
    """An append made when the oldest unflushed one is flush_ms old is fsync'd before it is
    acknowledged. The policy's monotonic clock is stepped by hand; the flush thread sleeps
    half of flush_ms (30 s) between ticks, so it does not tick during the test."""
    now = [100.0]
    monkeypatch.setattr(flush_policy, "time",
                        types.SimpleNamespace(monotonic=lambda: now[0], sleep=time.sleep))
    config = LogConfig(flush_ms=60_000, segment_bytes=BIG)
    with Log.open(tmp_path / "p", config=config, clock=FakeClock()) as log, \
            FaultInjector([str(tmp_path)]) as inj:
        seen = []
        for step_s in (0, 30, 29.999, 0.001, 1, 59.999, 0.001):
            now[0] += step_s
            log.append([Record(b"v")])
            seen.append(log_fsyncs(inj, log))
        # oldest unflushed at 100: 130, 159.999 are not yet 60 s later, 160 is; then the
        # oldest is 161: 220.999 is not, 221 is
        assert seen == [0, 0, 0, 1, 1, 1, 2]


def test_flush_ms_thread_fsyncs_appends_spread_over_time(tmp_path):
    """With flush_ms=20 the flush thread fsyncs each lone append within a short while (the
    waits are generous: only a count is asserted), once per append, and never when
    nothing is unflushed."""
    config = LogConfig(flush_ms=20, segment_bytes=BIG)
    with Log.open(tmp_path / "p", config=config, clock=FakeClock()) as log, \
            FaultInjector([str(tmp_path)]) as inj:
        for i in range(1, 5):
            log.append([Record(b"v%d" % i)])
            assert wait_until(lambda i=i: log_fsyncs(inj, log) >= i), \
                f"append {i}: no fsync within 10 s (flush_ms=20)"
            assert log_fsyncs(inj, log) == i  # the flushed append is not flushed again
        time.sleep(0.2)  # ten flush periods with nothing unflushed
        assert log_fsyncs(inj, log) == 4


def test_no_flush_setting_leaves_appends_to_the_os(tmp_path):
    """Neither flush_messages nor flush_ms: no append fsyncs, however long it waits (no
    flush thread runs)."""
    config = LogConfig(flush_messages=None, flush_ms=None, segment_bytes=BIG)
    with Log.open(tmp_path / "p", config=config, clock=FakeClock()) as log, \
            FaultInjector([str(tmp_path)]) as inj:
        for _ in range(3):
            log.append([Record(b"v")])
            time.sleep(0.05)
        assert log_fsyncs(inj, log) == 0


def test_a_failed_flush_ms_flush_does_not_end_the_thread(tmp_path, monkeypatch):
    """A flush the flush_ms thread makes that fails (an fsync refused: EIO, disk full) is
    logged and tried again at the next tick; it used to end the thread silently, and with
    it flush_ms for the rest of the log's life (issue 31's sweep of dead threads)."""
    import errno

    real = Maintenance._flush_if_overdue
    ticks = []

    def refused_once(maintenance):
        ticks.append(1)
        if len(ticks) == 1:
            raise OSError(errno.EIO, "Input/output error")
        return real(maintenance)

    monkeypatch.setattr(Maintenance, "_flush_if_overdue", refused_once)
    config = LogConfig(flush_ms=20, segment_bytes=BIG)
    with Log.open(tmp_path / "p", config=config, clock=FakeClock()) as log, \
            FaultInjector([str(tmp_path)]) as inj:
        assert wait_until(lambda: len(ticks) >= 1)  # the refused one came first
        log.append([Record(b"v")])
        assert wait_until(lambda: log_fsyncs(inj, log) >= 1), \
            "the flush thread died with its first failure: no fsync within 10 s"
