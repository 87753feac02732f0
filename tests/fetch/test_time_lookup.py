"""Log.offset_for_time (fetch/time_lookup.py), Kafka's offsetsForTimes: the first record in
offset order whose timestamp is at or after T, against a model (the records in a list),
across rolls, a clean reopen (sealed segments answer from their persisted time index), a
crash (recovered segments), compaction and retention; and the time index's last entry
holds each sealed segment's largest timestamp."""

from __future__ import annotations

import os

import pytest
from conftest import T0, FakeClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, OffsetAndTimestamp, Record
from kdelay.errors import KdelayError
from kdelay.testing.faults import close_abandoned

CFG = LogConfig(index_interval_bytes=64)


def model(records: list[tuple[int, int]], t: int) -> OffsetAndTimestamp | None:
    """The first (offset, timestamp) with timestamp >= t."""
    return next((OffsetAndTimestamp(o, ts) for o, ts in records if ts >= t), None)


# a batch is its records' timestamp offsets from T0; `roll` seals the segment after it
batches = st.lists(st.tuples(st.lists(st.integers(0, 500), min_size=1, max_size=5),
                             st.booleans()), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, growing=st.booleans(), reopen=st.sampled_from(["no", "clean", "crash"]))
def test_offset_for_time_matches_the_model(tmp_path_factory, batches, growing, reopen) -> None:
    path = str(tmp_path_factory.mktemp("t") / "p-0")
    clock = FakeClock(T0 + 10_000)
    log = Log.open(path, config=CFG, clock=clock)
    records: list[tuple[int, int]] = []
    top = 0
    for stamps, roll in batches:
        if growing:  # timestamps that grow with offsets, as the log clock's do
            stamps = [top + s for s in sorted(stamps)]
            top = stamps[-1]
        res = log.append([Record(b"v" * 20, timestamp=T0 + s) for s in stamps])
        records += [(res.base_offset + i, T0 + s) for i, s in enumerate(stamps)]
        if roll:
            log.roll()
    if reopen == "clean":
        log.close()
        log = Log.open(path, config=CFG, clock=clock)
    elif reopen == "crash":
        close_abandoned(log)
        log = Log.open(path, config=CFG, clock=clock)
    try:
        stamps = sorted({ts for _, ts in records})
        for t in {T0 - 1, *stamps, *(s + 1 for s in stamps)}:
            assert log.offset_for_time(t) == model(records, t), t
    finally:
        log.close()


def test_a_sealed_segment_s_time_index_ends_at_its_largest_timestamp(tmp_path) -> None:
    """The time index is sparse (an entry per index interval, when the timestamp grew): the
    roll adds the segment's largest timestamp, so a clean open knows it without a scan."""
    path = str(tmp_path / "p-0")
    log = Log.open(path, config=LogConfig(index_interval_bytes=1 << 20), clock=FakeClock())
    log.append([Record(b"a", timestamp=T0 + 5)])
    log.append([Record(b"b", timestamp=T0 + 9), Record(b"c", timestamp=T0 + 7)])
    log.roll()
    seg = log._segments[0]
    assert seg.time_index.last_key() == T0 + 9 and seg.time_index.floor(T0 + 9) == (T0 + 9, 1)
    log.close()
    log = Log.open(path, config=LogConfig(index_interval_bytes=1 << 20), clock=FakeClock())
    try:
        assert log._segments[0].max_timestamp == T0 + 9
        assert log.offset_for_time(T0 + 8) == OffsetAndTimestamp(1, T0 + 9)
        assert log.offset_for_time(T0 + 6) == OffsetAndTimestamp(1, T0 + 9)
        assert log.offset_for_time(T0 + 10) is None
    finally:
        log.close()


def test_after_retention_and_compaction(tmp_path) -> None:
    """Records gone by retention or compaction are not found; the next one is."""
    clock = FakeClock(T0)
    path = str(tmp_path / "p-0")
    cfg = LogConfig(index_interval_bytes=64, retention_ms=1000, compaction_min_ratio=0.1)
    log = Log.open(path, config=cfg, clock=clock)
    try:
        for i in range(6):
            log.append([Record(b"x", timestamp=T0 + i)], deliver_after=T0 + i)
            log.append([Record(b"y", timestamp=T0 + 100 + i)], deliver_after=T0 + 10 ** 9)
            log.roll()
        clock.t = T0 + 5000  # the "x" records are due for longer than retention_ms
        log.compact()
        assert log.offset_for_time(T0) == OffsetAndTimestamp(1, T0 + 100)
        assert log.offset_for_time(T0 + 103) == OffsetAndTimestamp(7, T0 + 103)
        assert log.offset_for_time(T0 + 106) is None
    finally:
        log.close()


def test_closed_and_bad_arguments(tmp_path) -> None:
    log = Log.open(os.fspath(tmp_path / "p-0"), config=CFG, clock=FakeClock())
    with pytest.raises(KdelayError):
        log.offset_for_time("1")  # type: ignore[arg-type]
    assert log.offset_for_time(0) is None  # an empty log
    log.close()
    with pytest.raises(KdelayError):
        log.offset_for_time(0)
