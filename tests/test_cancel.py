"""Cancel and reschedule through the public API (docs/api.md, "Cancel and reschedule")."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from conftest import T0

from kdelay import Consumer, DeliveryDelayExceededError, KdelayError, Log, LogConfig, Record, Topic
from kdelay.testing.checks import fetch_everything
from kdelay.testing.faults import close_abandoned


def _fill(log: Log, n: int, da: int, per_batch: int = 1) -> list[int]:
    offsets = []
    for i in range(0, n, per_batch):
        k = min(per_batch, n - i)
        res = log.append([Record(b"v%d" % (i + j), key=b"k%d" % (i + j)) for j in range(k)],
                         deliver_after=da)
        offsets += range(res.base_offset, res.last_offset + 1)
    return offsets


def _files(path: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(path, n)) for n in sorted(os.listdir(path))}


def test_cancel_withdraws_pending_records_one_by_one(open_log, clock):
    log = open_log()
    offs = _fill(log, 12, T0 + 1000, per_batch=4)
    assert log.cancel([1, 2, 6]) == 3
    assert log.cancel(9) == 1
    assert log.cancel([1, 9, 100, 6]) == 0  # cancelled already, or not in the log
    assert log.metrics()["cancelled_records"] == 4
    clock.t = T0 + 1000
    got = [r.offset for r in fetch_everything(log, page_size=3)]
    assert got == [o for o in offs if o not in (1, 2, 6, 9)]
    assert [r.offset for r in log.read(0, max_records=100)] == offs  # read still shows them
    assert log.cancel([0, 3]) == 0  # due now: refused, not counted


def test_cancel_counts_each_offset_once_and_skips_due(open_log, clock):
    log = open_log()
    log.append([Record(b"now")])  # due at once
    _fill(log, 3, T0 + 500)
    assert log.cancel([1, 1, 2, 0]) == 2
    assert log.metrics()["cancelled_records"] == 2


def test_page_fills_past_cancelled_records(open_log, clock):
    log = open_log()
    _fill(log, 200, T0 + 10, per_batch=10)
    assert log.cancel(range(0, 200, 2)) == 100
    assert log.cancel(range(100, 150)) == 25
    clock.t = T0 + 10
    page = log.fetch(None, max_records=30)
    want = [o for o in range(1, 200, 2) if not 100 <= o < 150]
    assert [r.offset for r in page.records] == want[:30]
    rest = fetch_everything(log, 500)
    assert len(rest) == len(want)


def test_whole_cancelled_batches_and_segments(open_log, clock):
    log = open_log(segment_bytes=600)
    offs = _fill(log, 60, T0 + 50, per_batch=3)
    assert len(log.segments) > 3
    assert log.cancel(offs[:30]) == 30
    clock.t = T0 + 50
    assert [r.offset for r in fetch_everything(log, page_size=7)] == offs[30:]


def test_numpy_ints_and_iterables(open_log):
    log = open_log()
    _fill(log, 6, T0 + 100)
    assert log.cancel(np.int64(0)) == 1
    assert log.cancel(np.array([1, 2], dtype=np.int32)) == 2
    assert log.cancel(o for o in (3, 4)) == 2
    assert log.reschedule(np.int64(5), np.int64(T0 + 900)).deliver_after == T0 + 900


@pytest.mark.parametrize("bad", [True, False, -1, 1.0, "3", None, [1, -2], [0, True],
                                 [0, 1.5], object(), b"\x01"])
def test_bad_offsets_raise_and_write_nothing(open_log, log_dir, bad):
    log = open_log(flush_messages=1)
    _fill(log, 3, T0 + 100)
    before = _files(log_dir)
    with pytest.raises(KdelayError):
        log.cancel(bad)
    if not isinstance(bad, list):
        with pytest.raises(KdelayError):
            log.reschedule(bad, T0 + 500)
    assert _files(log_dir) == before
    assert log.metrics()["cancelled_records"] == 0


@pytest.mark.parametrize("bad_da", [-1, True, 1.5, "x", None])
def test_reschedule_bad_deliver_after(open_log, log_dir, bad_da):
    log = open_log()
    _fill(log, 2, T0 + 100)
    before = _files(log_dir)
    with pytest.raises(KdelayError):
        log.reschedule(0, bad_da)
    assert _files(log_dir) == before and log.log_end_offset == 2


def test_reschedule_moves_one_record(open_log, clock):
    log = open_log()
    res = log.append([Record(b"a", key=b"ka", headers=[("h", b"1"), ("n", None)],
                             timestamp=T0 - 5),
                      Record(b"b", key=None)], deliver_after=T0 + 1000)
    moved = log.reschedule(res.base_offset, T0 + 3000)
    assert (moved.base_offset, moved.last_offset, moved.deliver_after) == (2, 2, T0 + 3000)
    earlier = log.reschedule(1, T0 + 200)
    assert earlier.deliver_after == T0 + 200
    assert log.metrics()["cancelled_records"] == 2
    clock.t = T0 + 5000
    got = fetch_everything(log, 500)
    assert [(r.offset, r.deliver_after) for r in got] == [(3, T0 + 200), (2, T0 + 3000)]
    copy = got[1]
    assert (copy.key, copy.value, copy.headers, copy.timestamp) == \
        (b"ka", b"a", [("h", b"1"), ("n", None)], T0 - 5)
    assert got[0].key is None and got[0].value == b"b"


def test_reschedule_into_the_past_is_due_now(open_log, clock):
    log = open_log()
    _fill(log, 1, T0 + 1000)
    clock.t = T0 + 10
    res = log.reschedule(0, T0 - 50)
    assert res.deliver_after == T0 + 10
    assert [r.offset for r in fetch_everything(log, 500)] == [1]


def test_reschedule_refusals_change_nothing(open_log, log_dir, clock):
    log = open_log(max_delivery_delay_ms=10_000)
    log.append([Record(b"due")])
    _fill(log, 2, T0 + 100)
    log.cancel(1)
    before = _files(log_dir)
    for off in (0, 1, 3, 10**6):  # due, cancelled, not in the log
        with pytest.raises(KdelayError):
            log.reschedule(off, T0 + 500)
    with pytest.raises(DeliveryDelayExceededError):
        log.reschedule(2, T0 + 20_000)  # the limit applies to the copy
    assert _files(log_dir) == before
    assert log.log_end_offset == 3 and log.metrics()["cancelled_records"] == 1


@pytest.mark.parametrize("how", ["clean", "crash", "roll"])
def test_cancellations_survive_reopen(log_dir, clock, how):
    cfg = LogConfig(flush_messages=1, segment_bytes=400)
    log = Log.open(log_dir, config=cfg, clock=clock)
    offs = _fill(log, 40, T0 + 100, per_batch=2)
    log.cancel(offs[::3])
    moved = log.reschedule(offs[1], T0 + 700)
    if how == "roll":
        log.roll()
    if how == "crash":
        close_abandoned(log)
    else:
        log.close()
    log = Log.open(log_dir, config=cfg, clock=clock)
    try:
        assert log.load_report.clean == (how != "crash")
        cancelled = set(offs[::3]) | {offs[1]}
        assert log.metrics()["cancelled_records"] == len(cancelled)
        assert log.cancel(offs[::3]) == 0
        # new appends after the reopen are not cancelled
        extra = _fill(log, 3, T0 + 100)
        clock.t = T0 + 1000
        got = [r.offset for r in fetch_everything(log, page_size=9)]
        want = [o for o in offs if o not in cancelled] + extra + [moved.base_offset]
        assert sorted(got) == sorted(want) and len(got) == len(want)
    finally:
        log.close()


def test_retention_drops_cancellations_with_their_segment(log_dir, clock):
    cfg = LogConfig(segment_bytes=300, retention_ms=1000)
    log = Log.open(log_dir, config=cfg, clock=clock)
    try:
        _fill(log, 30, T0 + 100, per_batch=3)
        log.cancel(range(0, 30, 2))
        log.roll()
        clock.t = T0 + 5000
        assert log.enforce_retention() > 0
        assert log.metrics()["cancelled_records"] == \
            sum(1 for o in range(0, 30, 2) if o >= log.log_start_offset)
        left = {n.split(".")[0] for n in os.listdir(log_dir) if n.endswith(".cancels")}
        assert all(int(b) >= log.log_start_offset for b in left)
    finally:
        log.close()


def test_topic_and_consumer(tmp_path, clock):
    with Topic.open(os.fspath(tmp_path), "jobs", partitions=2, clock=clock) as topic:
        p, r1 = topic.send([Record(b"x", key=b"a")], deliver_after=T0 + 100)
        _, r2 = topic.send([Record(b"y", key=b"a")], deliver_after=T0 + 100)
        _, r3 = topic.send([Record(b"z", key=b"a")], deliver_after=T0 + 100)
        assert topic.cancel(p, [r1.base_offset]) == 1
        moved = topic.reschedule(p, r2.base_offset, T0 + 200)
        with pytest.raises(KdelayError):
            topic.cancel(5, [0])
        clock.t = T0 + 300
        polled = Consumer(topic, "g").poll(timeout_ms=0)
        assert [(r.value, r.offset) for r in polled] == \
            [(b"z", r3.base_offset), (b"y", moved.base_offset)]


def test_concurrent_cancels_appends_and_fetches(open_log, clock):
    """Whatever interleaving: a cancelled record is never returned by a fetch that started
    after cancel returned, and every other record is delivered exactly once."""
    log = open_log(segment_bytes=2000)
    delivered: list[int] = []
    cancelled_at: dict[int, int] = {}  # offset -> len(delivered) when its cancel returned
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    cursor: list = [None]

    def consumer():
        try:
            while not stop.is_set():
                res = log.fetch(cursor[0], max_records=7)
                with lock:
                    delivered.extend(r.offset for r in res.records)
                cursor[0] = res.next
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=consumer)
    t.start()
    try:
        appended = []
        for i in range(150):
            res = log.append([Record(b"r%d" % i)] * 2,
                             deliver_after=T0 + (1 if i % 2 else 10 ** 9))
            appended += [res.base_offset, res.last_offset]
            if i % 3 == 0 and i:
                target = appended[-3]
                if log.cancel(target):
                    with lock:
                        cancelled_at[target] = len(delivered)
            if i % 10 == 5:
                clock.advance(1)
        clock.t = T0 + 10 ** 9
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    rest, after = [], cursor[0]
    while True:  # the same consumer, on from where its thread stopped
        res = log.fetch(after, max_records=50)
        if not res.records:
            break
        rest += res.records
        after = res.next
    all_got = delivered + [r.offset for r in rest]
    assert len(all_got) == len(set(all_got))
    assert set(all_got) == set(appended) - set(cancelled_at)
    for off in cancelled_at:
        assert off not in delivered


def test_compaction_removes_cancelled_records_and_the_count_follows(log_dir, clock):
    cfg = LogConfig(segment_bytes=400, compaction_min_ratio=0.3, flush_messages=None)
    log = Log.open(log_dir, config=cfg, clock=clock)
    try:
        offs = _fill(log, 60, T0 + 100, per_batch=3)
        log.cancel(offs[:45])
        moved = log.reschedule(offs[50], T0 + 900)  # not flushed: its MOVE is unconfirmed
        log.roll()  # a roll checkpoints (fsyncs the .log): the move is confirmed now
        moved2 = log.reschedule(offs[55], T0 + 900)
        before = log.metrics()["cancelled_records"]
        assert before == 47
        result = log.compact()
        assert result.segments_rewritten > 0
        after = log.metrics()["cancelled_records"]
        assert after < before
        # what is left cancelled is still in the log, the original of the move that was
        # unconfirmed during the rewrite among it (compaction then settled that move, so
        # that the count is exact: see the next test)
        left = log._maintenance.cancelled(0, log.log_end_offset)
        assert len(left) == after and offs[55] in left
        assert {r.offset for r in log.read(0, max_records=1000)} >= set(left)
        clock.t = T0 + 1000
        got = [r.offset for r in fetch_everything(log, 500)]
        want = sorted(set(offs[45:]) - {offs[50], offs[55]}) + [moved.base_offset,
                                                                moved2.base_offset]
        assert sorted(got) == sorted(want)
    finally:
        log.close()
    with Log.open(log_dir, config=cfg, clock=clock) as log:
        assert log.metrics()["cancelled_records"] == after
        assert sorted(r.offset for r in fetch_everything(log, 500)) == sorted(want)


def test_cancelled_count_is_exact_after_compacting_a_segment_with_a_pending_move(log_dir,
                                                                                 clock):
    """Regression (found by the delivery model): the cancellations of records compaction
    removed were kept (and counted) when their segment also held the original of a
    reschedule whose copy was not yet fsync'd."""
    cfg = LogConfig(segment_bytes=150, retention_ms=0, flush_messages=None)
    log = Log.open(log_dir, config=cfg, clock=clock)
    try:
        log.append([Record(b"v") for _ in range(3)], deliver_after=T0 + 1)  # 0..2
        log.reschedule(2, T0 + 5)  # copy at 3 in the active segment, not fsync'd
        assert log.cancel([0, 1]) == 2
        assert log.metrics()["cancelled_records"] == 3
        assert log.compact().segments_rewritten == 1
        present = {r.offset for r in log.read(0, max_records=100)}
        assert 0 not in present and 1 not in present and 3 in present
        # compaction fsyncs the copy first (settling the move), so 2 goes with 0 and 1
        assert log.metrics()["cancelled_records"] == len(present & {0, 1, 2}) == 0
    finally:
        log.close()
    with Log.open(log_dir, config=cfg, clock=clock) as log:
        assert log.metrics()["cancelled_records"] == 0
        clock.t = T0 + 10
        assert [r.offset for r in fetch_everything(log, 500)] == [3]


def test_compaction_keeps_the_original_of_an_unconfirmed_move(log_dir, clock):
    cfg = LogConfig(segment_bytes=300, flush_messages=None)
    log = Log.open(log_dir, config=cfg, clock=clock)
    try:
        _fill(log, 30, T0 + 100, per_batch=3)
        log.roll()
        log.reschedule(4, T0 + 900)  # copy in the active segment, not fsynced yet
        assert 4 not in log._maintenance.cancelled(0, 30)  # compaction must not remove it
        log.cancel(5)
        assert 5 in log._maintenance.cancelled(0, 30)
        log.flush()  # the copy is durable: the move is confirmed
        assert 4 in log._maintenance.cancelled(0, 30)
    finally:
        log.close()


def test_compaction_never_merges_away_a_cancellation_made_during_the_rewrite(log_dir, clock):
    """A segment merged into its neighbour takes its records along but not its
    cancellation files: a cancel that compaction did not see (made while it was rewriting)
    must stop the swap, or the record would be delivered after all."""
    cfg = LogConfig(segment_bytes=2000, retention_ms=0, compaction_min_ratio=0.3)
    log = Log.open(log_dir, config=cfg, clock=clock)
    try:
        _fill(log, 30, T0, per_batch=3)  # due at once: removable (retention_ms=0)
        log.roll()
        later = _fill(log, 6, T0 + 5000, per_batch=3)  # pending, in a small second segment
        log.roll()
        assert log.cancel(later[:2]) == 2
        clock.t = T0 + 10
        hook = log._maintenance.cancelled
        log._maintenance.cancelled = lambda first, end: []  # the rewrite does not see them
        try:
            log.compact()
        finally:
            log._maintenance.cancelled = hook
        assert log.metrics()["cancelled_records"] == 2
        clock.t = T0 + 6000
        assert sorted(r.offset for r in fetch_everything(log, 500) if r.offset >= later[0]) == later[2:]
    finally:
        log.close()
    with Log.open(log_dir, config=cfg, clock=clock) as log:
        assert sorted(r.offset for r in fetch_everything(log, 500) if r.offset >= later[0]) == later[2:]
