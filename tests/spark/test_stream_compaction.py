"""The streaming source against a compaction (issue 26, point 6), first without Spark.

A micro-batch is planned (the live catalogue: which batches, where), then compaction
rewrites or merges the segments it lies in, then the range is read: the read returns
exactly the planned records still in the log, in key order, none twice, where it used to
die with `CorruptLogError: bad magic byte`. A compaction's swap in progress plans nothing
new; a reader waits for it; real damage is still an error.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from conftest import skip_module_without_spark_libraries

from kdelay import CorruptLogError, KdelayError, Log, LogConfig, Record
from kdelay.log.segments.layout import segment_file

skip_module_without_spark_libraries()

from kdelay.spark import range_read, scan  # noqa: E402
from kdelay.spark.live import NO_BOUND, LivePartition, settled  # noqa: E402
from kdelay.spark.stream import read_range  # noqa: E402

T0 = 1_700_000_000_000
HOUR = 3_600_000
BEFORE_ALL = (-1, -1)


def _build(path: str, clock: list[int], *, merge: bool = False, batches: int = 40,
           retention_ms: int = 7 * 24 * HOUR) -> Log:
    """Per round: one batch due soon (3 records) and one single-record batch due in an
    hour, then most of the latter cancelled: segments compaction wants to rewrite (with
    `merge`, the cancelled records are most of each segment: the survivors of neighbours
    are merged into one segment)."""
    segment_bytes, pad = (6000, 50) if merge else (2000, 1)
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=128,
                    compaction_min_ratio=0.1, retention_ms=retention_ms)
    log = Log.open(path, config=cfg, clock=lambda: clock[0])
    later = []
    for i in range(batches):
        log.append([Record(b"d%d-%d" % (i, k) * 5) for k in range(3)], deliver_after=T0 + 10 + i)
        later.append(log.append([Record(b"p%d" % i * 20 * pad)],
                                deliver_after=T0 + HOUR).base_offset)
    assert log.cancel(later[:-3]) == len(later) - 3
    return log


def _plan(path: str, now: int, start=BEFORE_ALL) -> tuple[LivePartition, tuple, list]:
    live = LivePartition(scan.PartitionDir(path), start)
    end = live.latest(live.refresh(now), start)
    return live, end, live.between(start, end)


def _keys(rbs) -> list[tuple[int, int]]:
    return [(r["deliver_after"], r["offset"]) for rb in rbs for r in rb.to_pylist()]


def _due(log: Log, upto: tuple[int, int]) -> list[tuple[int, int]]:
    """The keys of the engine's due records (cancelled ones left out) at or before `upto`."""
    got = log.fetch(None, max_records=1 << 20, max_bytes=1 << 30).records
    return [(r.deliver_after, r.offset) for r in got if (r.deliver_after, r.offset) <= upto]


def test_plan_compact_read_rewritten_in_place(tmp_path) -> None:
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock) as log:
        _, end, planned = _plan(path, T0 + 100)
        want = _keys(read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned))
        assert len(want) == 120 and want == sorted(set(want))
        segments = log.segments
        assert log.compact().segments_rewritten >= 3
        assert log.segments == segments  # rewritten in place: positions moved
        got = _keys(read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned))
        clock[0] = T0 + 100
        assert got == want == _due(log, end)


def test_plan_compact_read_merged_segments(tmp_path) -> None:
    """Small survivors: compaction merges neighbours, deleting their .log files."""
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock, merge=True) as log:
        _, end, planned = _plan(path, T0 + 100)
        before = log.segments
        assert len({b[3] for b in planned}) > 2
        assert log.compact().segments_rewritten >= 2
        assert len(log.segments) < len(before)  # merged: some planned segments are gone
        got = _keys(read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned))
        clock[0] = T0 + 100
        assert got == _due(log, end) and len(got) == 120


def test_compaction_between_two_runs_of_one_read(tmp_path) -> None:
    """The read has handed on its first run when compaction swaps the rest away: it goes
    on from the last record it handed on, against the new files."""
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock) as log:
        _, end, planned = _plan(path, T0 + 100)
        reading = read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned)
        first = next(reading)
        assert log.compact().segments_rewritten >= 3
        got = _keys([first, *reading])
        clock[0] = T0 + 100
        assert got == _due(log, end) and len(got) == 120


def test_records_compaction_removed_meanwhile_are_left_out(tmp_path) -> None:
    """Records due longer than retention_ms ago may go (the contract's removable rule):
    the read leaves out exactly those, and hands on every other planned one."""
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock, retention_ms=HOUR) as log:
        clock[0] = T0 + HOUR + 30  # the first 20 rounds' due batches are now removable
        _, end, planned = _plan(path, clock[0])
        assert log.compact().segments_rewritten >= 3
        got = _keys(read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned))
        assert got == _due(log, end)
        # round i: offsets 4i..4i+2 due at T0 + 10 + i, 4i+3 (mostly cancelled) later
        removable = {(T0 + 10 + i, 4 * i + k) for i in range(20) for k in range(3)}
        assert removable <= {(b[0], o) for b in planned for o in range(b[1], b[2] + 1)}
        assert not removable & set(got)
        assert len(got) == 120 - len(removable) + 3  # and the 3 later ones not cancelled


def test_damage_is_still_an_error(tmp_path) -> None:
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock):
        _, end, planned = _plan(path, T0 + 100)
        victim = planned[5]
        log_path = segment_file(path, victim[3], ".log")
    with open(log_path, "r+b") as f:  # a byte of its records: the CRC fails
        f.seek(victim[4] + victim[5] - 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptLogError, match="CRC"):
        _keys(read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned))


def _during_the_swap(monkeypatch, act) -> None:
    """Run `act()` inside compaction's swap, just before its final rename of a .log
    (merged-away .log files already deleted, the new one not yet in place)."""
    from kdelay import fsio

    rename = fsio.rename

    def hooked(src: str, dst: str) -> None:
        if src.endswith(".log.swap"):
            act()
        rename(src, dst)

    monkeypatch.setattr(fsio, "rename", hooked)


def test_catalogue_plans_nothing_new_during_a_swap(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock, merge=True) as log:
        live, end, planned = _plan(path, T0 + 100)
        held = list(live.batches)
        seen = []

        def refresh() -> None:
            seen.append(live.refresh(T0 + 200))
            seen.append(list(live.batches))

        _during_the_swap(monkeypatch, refresh)
        assert log.compact().segments_rewritten >= 2
        monkeypatch.undo()
        assert seen[0::2] == [NO_BOUND] * (len(seen) // 2)  # a swap in progress
        assert all(b == held for b in seen[1::2])  # and nothing dropped meanwhile
        assert live.refresh(T0 + 200) == T0 + 199  # held still again
        clock[0] = T0 + 100
        assert [(b[0], o) for b in live.between(BEFORE_ALL, end)
                for o in range(b[1], b[2] + 1)] == _due(log, end)


def test_reader_waits_out_a_swap_in_progress(tmp_path, monkeypatch) -> None:
    """A read that finds its planned segments deleted mid-swap waits for the swap to
    finish and reads the new segment."""
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock, merge=True) as log:
        _, end, planned = _plan(path, T0 + 100)
        got: list = []

        def read_in_a_thread() -> None:
            t = threading.Thread(target=lambda: got.append(_keys(read_range(
                scan.PartitionDir(path), BEFORE_ALL, end, planned))))
            t.start()
            time.sleep(0.3)  # the reader finds a .log gone and the swap unfinished
            got.append(t)

        _during_the_swap(monkeypatch, read_in_a_thread)
        assert log.compact().segments_rewritten >= 2
        monkeypatch.undo()
        for t in [x for x in got if isinstance(x, threading.Thread)]:
            t.join(30)
        results = [x for x in got if isinstance(x, list)]
        clock[0] = T0 + 100
        assert results and all(r == _due(log, end) for r in results)


def test_a_swap_that_never_finishes_is_an_error(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "p")
    clock = [T0]
    with _build(path, clock) as log:
        _, end, planned = _plan(path, T0 + 100)
        base = log.segments[0]
    os.remove(segment_file(path, planned[0][3], ".log"))  # as if merged away...
    open(segment_file(path, base, ".log.swap"), "wb").close()  # ...by a swap left undone
    with pytest.raises(KdelayError, match="did not hold still"):
        settled(scan.PartitionDir(path), BEFORE_ALL, 0.05)
    monkeypatch.setattr(range_read, "SETTLE_S", 0.05)
    with pytest.raises(KdelayError, match="did not hold still"):
        _keys(read_range(scan.PartitionDir(path), BEFORE_ALL, end, planned))


def test_held_still_tolerates_rolls_only() -> None:
    """The rule a refresh vouches by: the same .log inodes before and after, a segment
    rolled after the last one listed aside; nothing while a swap is being installed."""
    from kdelay.spark.live import _held_still

    before = {0: 11, 10: 12, 20: 13}
    assert _held_still(before, dict(before))
    assert _held_still(before, {**before, 30: 14})  # rolled meanwhile
    assert not _held_still(before, {0: 11, 10: 99, 20: 13})  # 10 rewritten
    assert not _held_still(before, {0: 11, 20: 13})  # 10 deleted (merged, retention)
    assert not _held_still(before, {0: 11, 5: 98, 10: 12, 20: 13})  # one before the last
    assert not _held_still(None, before) and not _held_still(before, None)  # a swap
    assert _held_still({}, {0: 1})  # the first segment appeared
    # sealed segments are known by (inode, ctime): a rewrite under a reused inode shows
    sealed = {0: (11, 5), 10: (12, 6), 20: 13}
    assert _held_still(sealed, {0: (11, 5), 10: (12, 6), 20: 13})
    assert not _held_still(sealed, {0: (11, 5), 10: (12, 9), 20: 13})  # 10 rewritten
    # the last one sealed by a roll meanwhile: the same inode is the same file
    assert _held_still(sealed, {0: (11, 5), 10: (12, 6), 20: (13, 7), 30: 14})
    assert not _held_still(sealed, {0: (11, 5), 10: (12, 6), 20: (99, 7), 30: 14})
