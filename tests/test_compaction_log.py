"""Log.compact() and compaction through enforce_retention: the contract's promises on a live
log (reads across gaps, fetch by removed offset, committed keys, reopen clean and after a
crash, appends and fetches while compacting)."""

from __future__ import annotations

import os
import threading

import pytest

from kdelay import (
    CompactionResult,
    DeliveryKey,
    InvalidConfigError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    Record,
)
from kdelay.testing.compaction_model import HOUR, T0, Clock, Model, read_dir, records
from kdelay.testing.faults import close_abandoned

DAY = 24 * HOUR
CFG = LogConfig(segment_bytes=1500, index_interval_bytes=128, retention_ms=HOUR,
                compaction_min_ratio=0.5)


def _pinned_log(path, clock, n=40, cfg=CFG):
    """Batches of 4: every 5th due in 30 days, the rest due at once."""
    m = Model()
    log = Log.open(path, config=cfg, clock=clock)
    for i in range(n):
        m.append(log, records(4, f"b{i}"), T0 + (30 * DAY if i % 5 == 0 else 0))
    return log, m


def _survivors(m, now, retention_ms=HOUR):
    return {o: r for o, r in m.rows.items() if r[4] >= now - retention_ms}


def _read_all(log, start=0, page=5):
    out, offset = [], start
    while True:
        got = log.read(offset, max_records=page)
        if not got:
            return out
        out += got
        offset = got[-1].offset + 1


def test_config_ratio_is_checked():
    assert LogConfig().compaction_min_ratio == 0.5
    for bad in (-0.1, 1.5, "0.5", True, float("nan"), None):
        with pytest.raises(InvalidConfigError):
            LogConfig(compaction_min_ratio=bad)
    LogConfig(compaction_min_ratio=0)
    LogConfig(compaction_min_ratio=1)


def test_compact_keeps_offsets_and_reads_skip_gaps(tmp_path):
    clock = Clock()
    log, m = _pinned_log(str(tmp_path / "p"), clock)
    sealed_before = log.segments[:-1]
    start = log.log_start_offset
    clock.t = T0 + 2 * HOUR
    res = log.compact()
    assert isinstance(res, CompactionResult)
    assert res.segments_rewritten >= 3 and res.bytes_after < res.bytes_before / 2
    assert res.bytes_after == sum(os.path.getsize(p) for p in _logs(log.path))
    assert log.log_start_offset == start and set(log.segments) < set(sealed_before) | {
        log.segments[-1]}
    active = log.segments[-1]
    keep = {o: r for o, r in _survivors(m, clock.t).items()}
    assert log.metrics()["records"] == len(_read_all(log))
    # sealed: only survivors; active: everything
    expected = {o: r for o, r in m.rows.items() if o in keep or o >= active}
    got = _read_all(log)
    assert [r.offset for r in got] == sorted(expected)
    for r in got:
        assert (r.key, r.value, list(r.headers), r.timestamp, r.deliver_after) == expected[r.offset]
    # read from inside a gap continues at the next surviving offset
    removed = sorted(set(m.rows) - set(expected))
    assert removed
    for o in removed[:10]:
        nxt = min(x for x in expected if x > o)
        assert log.read(o, max_records=1)[0].offset == nxt
        with pytest.raises(OffsetOutOfRangeError):
            log.fetch(o)
    # fetch by DeliveryKey at a removed position works, and by a surviving offset too
    page = log.fetch(DeliveryKey(T0, removed[0]), max_records=1000)
    assert all(r.offset in expected for r in page.records)
    surviving = sorted(o for o in expected if o < active)[0]
    log.fetch(surviving)
    log.close()


def _logs(path):
    return [os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log")]


def test_result_says_how_much_sits_in_the_active_segment(tmp_path):
    """Records due long ago but still in the active segment: nothing is reclaimed, and the
    result says where the bytes are; once rolled, they are reclaimed."""
    clock = Clock()
    with Log.open(str(tmp_path / "p"), config=CFG, clock=clock) as log:
        log.append(records(4, "a"), deliver_after=T0)
        clock.t = T0 + 2 * HOUR
        res = log.compact()
        assert res.segments_rewritten == 0 and res.bytes_after == res.bytes_before
        assert res.active_segment_bytes == res.bytes_before > 0
        log.roll()
        res = log.compact()
        assert res.segments_rewritten == 1 and res.bytes_after == res.active_segment_bytes == 0


def test_committed_keys_and_fetch_order_survive(tmp_path):
    clock = Clock()
    path = str(tmp_path / "p")
    log, m = _pinned_log(path, clock)
    first = log.fetch(None, max_records=7)
    log.commit("g", first.next)
    clock.t = T0 + 2 * HOUR
    assert log.compact().segments_rewritten
    # the committed key points at a removed record: fetching after it still works
    clock.t = T0 + 31 * DAY
    seen, cur = [], log.committed("g")
    while True:
        page = log.fetch(cur, max_records=6)
        if not page.records:
            break
        seen += [(r.deliver_after, r.offset) for r in page.records]
        cur = page.next
    now_rows = {r.offset: r for r in _read_all(log)}
    assert seen == sorted((r.deliver_after, r.offset) for r in now_rows.values()
                          if (r.deliver_after, r.offset) > tuple(first.next))
    log.close()


@pytest.mark.parametrize("how", ["clean", "crash", "indexes_lost"])
def test_reopen_compacted(tmp_path, how):
    clock = Clock()
    path = str(tmp_path / "p")
    log, m = _pinned_log(path, clock)
    clock.t = T0 + 2 * HOUR
    log.compact()
    before = [(r.offset, r.value) for r in _read_all(log)]
    if how == "clean":
        log.close()
    else:
        close_abandoned(log)
    if how == "indexes_lost":
        for n in os.listdir(path):
            if n.endswith((".index", ".dlyindex", ".timeindex")):
                os.unlink(os.path.join(path, n))
    log = Log.open(path, config=CFG, clock=clock)
    try:
        assert [(r.offset, r.value) for r in _read_all(log)] == before
        assert not [p for p in log.load_report.problems if "gap" in p], log.load_report.problems
        nxt = log.log_end_offset
        assert log.append(records(1, "x")).base_offset == nxt
    finally:
        log.close()


def test_enforce_retention_compacts_and_zero_ratio_never_does(tmp_path):
    for ratio, expect in ((0.5, True), (0, False)):
        clock = Clock()
        cfg = LogConfig(segment_bytes=1500, index_interval_bytes=128, retention_ms=HOUR,
                        compaction_min_ratio=ratio)
        log, m = _pinned_log(str(tmp_path / f"p{ratio}"), clock, cfg=cfg)
        size = log.metrics()["bytes"]
        clock.t = T0 + 2 * HOUR
        log.enforce_retention()
        assert (log.metrics()["bytes"] < size / 2) == expect
        assert (log.metrics()["compaction"]["segments_rewritten"] > 0) == expect
        assert log.compact().segments_rewritten == 0
        log.close()


def test_non_removable_never_lost_whatever_retention_bytes(tmp_path):
    clock = Clock()
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=128, retention_ms=HOUR,
                    retention_bytes=10)
    log, m = _pinned_log(str(tmp_path / "p"), clock, cfg=cfg)
    clock.t = T0 + 2 * HOUR
    log.enforce_retention()
    log.compact()
    got = {r.offset for r in _read_all(log)}
    pinned = {o for o, r in m.rows.items() if r[4] > clock.t}
    assert pinned <= got
    log.close()


def test_cancel_hook_removes_cancelled_records(tmp_path):
    clock = Clock()
    log, m = _pinned_log(str(tmp_path / "p"), clock)
    cancelled = {o for o in m.rows if o % 3 == 0 and m.rows[o][4] > T0}
    log._maintenance.cancelled = lambda lo, hi: sorted(o for o in cancelled if lo <= o < hi)
    clock.t = T0 + 2 * HOUR
    log.compact()
    got = {r.offset for r in _read_all(log)}
    sealed_end = log.segments[-1]
    assert not {o for o in cancelled if o < sealed_end} & got
    assert {o for o, r in m.rows.items() if r[4] > clock.t and o not in cancelled} <= got
    log.close()


def test_appends_and_fetches_continue_while_compacting(tmp_path):
    clock = Clock()
    cfg = LogConfig(segment_bytes=4000, index_interval_bytes=256, retention_ms=HOUR)
    log, m = _pinned_log(str(tmp_path / "p"), clock, n=300, cfg=cfg)
    clock.t = T0 + 2 * HOUR
    stop = threading.Event()
    appended: list[int] = []
    errors: list[BaseException] = []

    def appender():
        try:
            while not stop.is_set():
                appended.append(log.append([Record(b"live")]).base_offset)
                log.fetch(None, max_records=50)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    th = threading.Thread(target=appender)
    th.start()
    try:
        for _ in range(3):
            log.compact()
    finally:
        stop.set()
        th.join()
    assert not errors
    got = {r.offset: r.value for r in _read_all(log, page=500)}
    assert all(got[o] == b"live" for o in appended)
    pinned = {o for o, r in m.rows.items() if r[4] > clock.t}
    assert pinned <= set(got)
    log.close()


def test_compacted_directory_files(tmp_path):
    clock = Clock()
    path = str(tmp_path / "p")
    log, m = _pinned_log(path, clock)
    clock.t = T0 + 2 * HOUR
    log.compact()
    log.close()
    assert any(n.endswith(".compacted") for n in os.listdir(path))
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    rows = read_dir(path)
    assert set(_survivors(m, clock.t)) <= set(rows)
