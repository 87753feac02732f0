"""Unit tests of the Log facade against docs/api.md: append, fetch, read, roll, retention, errors."""

from __future__ import annotations

import itertools
import os
import sys
import threading

import numpy as np
import pytest
from conftest import T0

from kdelay import (
    DelayedDeliveryDisabledError,
    DeliveryDelayExceededError,
    DeliveryKey,
    InvalidRecordError,
    KdelayError,
    Log,
    LogConfig,
    PackedBinary,
    Record,
)


def _sizes(path: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
            if n.endswith(".log")}


def _vals(records) -> list[bytes]:
    return [r.value for r in records]


# ---------------------------------------------------------------------------- append

def test_append_result_and_roundtrip(open_log, clock):
    log = open_log()
    recs = [Record(b"a", key=b"k1", headers=[("h", b"x"), ("n", None)]),
            Record(b"", key=None), Record(b"c" * 1000, key=b"")]
    res = log.append(recs)
    assert res == (0, 2, T0, T0)
    assert (res.base_offset, res.last_offset, res.deliver_after, res.append_time) == \
        (0, 2, T0, T0)
    page = log.fetch()
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp, r.deliver_after)
            for r in page.records] == [
        (0, b"k1", b"a", [("h", b"x"), ("n", None)], T0, T0),
        (1, None, b"", [], T0, T0),
        (2, b"", b"c" * 1000, [], T0, T0)]
    assert page.next == DeliveryKey(T0, 2)
    assert log.log_end_offset == 3 and log.log_start_offset == 0


def test_record_timestamps_kept(open_log):
    log = open_log()
    log.append([Record(b"a", timestamp=5), Record(b"b"), Record(b"c", timestamp=T0 + 9)])
    assert [r.timestamp for r in log.read(0)] == [5, T0, T0 + 9]


@pytest.mark.parametrize("explicit, rec_das, want", [
    (None, [None, None], T0),                      # none: due at once
    (None, [T0 - 50, None], T0),                   # past: clamped to append time
    (None, [T0 + 10, T0 + 30, None], T0 + 30),     # max of the records'
    (T0 + 5, [T0 + 100], T0 + 5),                  # explicit wins, even below the records'
    (T0 - 1000, [T0 + 100], T0),                   # explicit in the past: append time
    (0, [None], T0),
])
def test_batch_deliver_after(open_log, explicit, rec_das, want):
    log = open_log()
    res = log.append([Record(b"v", deliver_after=d) for d in rec_das], deliver_after=explicit)
    assert res.deliver_after == want
    assert {r.deliver_after for r in log.read(0)} == {want}


def test_offsets_continue_across_batches_and_segments(open_log):
    log = open_log(segment_bytes=200)
    results = [log.append([Record(b"x" * 30)] * n) for n in (1, 3, 2, 5, 1)]
    assert [(r.base_offset, r.last_offset) for r in results] == \
        [(0, 0), (1, 3), (4, 5), (6, 10), (11, 11)]
    assert len(log.segments) > 1
    assert [r.offset for r in log.read(0)] == list(range(12))


# ---------------------------------------------------------------------------- fetch

def test_fetch_due_order_and_never_early(open_log, clock):
    log = open_log()
    log.append([Record(b"late")], deliver_after=T0 + 100)
    log.append([Record(b"now")])
    log.append([Record(b"mid")], deliver_after=T0 + 50)
    log.append([Record(b"mid2")], deliver_after=T0 + 50)
    page = log.fetch()
    assert _vals(page.records) == [b"now"]
    clock.advance(49)
    empty = log.fetch(page.next)
    assert empty.records == [] and empty.next == page.next
    clock.advance(1)  # deliver_after == now is due
    page = log.fetch(page.next)
    assert _vals(page.records) == [b"mid", b"mid2"]
    clock.advance(50)
    page = log.fetch(page.next)
    assert _vals(page.records) == [b"late"]
    assert page.next == DeliveryKey(T0 + 100, 0)


def test_fetch_after_forms(open_log, clock):
    log = open_log()
    log.append([Record(b"a"), Record(b"b")], deliver_after=T0 + 10)
    log.append([Record(b"c")])
    clock.advance(10)
    assert _vals(log.fetch().records) == [b"c", b"a", b"b"]
    # an int is the offset of the last consumed record; its deliverAfter is looked up
    assert _vals(log.fetch(2).records) == [b"a", b"b"]
    assert _vals(log.fetch(0).records) == [b"b"]
    assert _vals(log.fetch(DeliveryKey(T0 + 10, 0)).records) == [b"b"]
    # nothing after the last record: next echoes `after` as a DeliveryKey
    res = log.fetch(1)
    assert res.records == [] and res.next == DeliveryKey(T0 + 10, 1)
    res = log.fetch(DeliveryKey(T0 + 10, 1))
    assert res.records == [] and res.next == DeliveryKey(T0 + 10, 1)
    # a cursor between keys that no record holds
    assert _vals(log.fetch(DeliveryKey(T0 + 5, 99)).records) == [b"a", b"b"]


def test_fetch_nothing_due_from_start_returns_none(open_log):
    log = open_log()
    assert log.fetch() == ([], None)
    log.append([Record(b"x")], deliver_after=T0 + 1)
    assert log.fetch() == ([], None)


def test_fetch_max_records_splits_a_batch(open_log):
    log = open_log()
    log.append([Record(b"%d" % i) for i in range(10)])
    got, after = [], None
    for _ in range(4):
        res = log.fetch(after, max_records=3)
        got += _vals(res.records)
        after = res.next
    assert got == [b"%d" % i for i in range(10)]
    assert after == DeliveryKey(T0, 9)


def test_fetch_fills_page_across_batches_and_segments(open_log, clock):
    log = open_log(segment_bytes=300)
    for i in range(40):
        log.append([Record(b"v%d" % i)], deliver_after=T0 + (i * 7919) % 40)
    clock.advance(100)
    assert len(log.segments) > 3
    res = log.fetch(max_records=25)
    assert len(res.records) == 25
    res2 = log.fetch(res.next, max_records=500)
    assert len(res2.records) == 15
    keys = [r.delivery_key for r in res.records + res2.records]
    assert keys == sorted(keys) and len(set(keys)) == 40


def test_fetch_max_bytes_soft_cap(open_log):
    log = open_log()
    for _ in range(3):
        log.append([Record(b"x" * 500)] * 2)
    res = log.fetch(max_bytes=1)
    assert len(res.records) == 2  # at least one whole batch
    res = log.fetch(max_bytes=1 << 20)
    assert len(res.records) == 6


def test_fetch_bad_arguments(open_log):
    log = open_log()
    log.append([Record(b"x")])
    for kw in ({"max_records": 0}, {"max_bytes": 0}, {"max_records": 1.5},
               {"max_wait_ms": -1}):
        with pytest.raises(KdelayError):
            log.fetch(**kw)
    with pytest.raises(KdelayError):
        log.fetch("0")
    with pytest.raises(KdelayError):
        log.fetch(5)  # not in the log


# ---------------------------------------------------------------------------- read

def test_read_offset_order(open_log, clock):
    log = open_log(segment_bytes=250, index_interval_bytes=1)
    for i in range(30):
        log.append([Record(b"%d" % (2 * i)), Record(b"%d" % (2 * i + 1))],
                   deliver_after=T0 + 1000 - i)
    assert [r.offset for r in log.read(0, max_records=500)] == list(range(60))
    got = log.read(17, max_records=5)
    assert [r.offset for r in got] == [17, 18, 19, 20, 21]
    assert _vals(got) == [b"17", b"18", b"19", b"20", b"21"]
    assert got[0].deliver_after == T0 + 1000 - 8
    assert log.read(60) == []
    assert log.read(1000) == []
    with pytest.raises(KdelayError):
        log.read(-1)


# ---------------------------------------------------------------------------- roll

def test_roll(open_log, clock):
    log = open_log()
    log.roll()  # empty active segment: nothing to seal
    assert log.segments == [0]
    log.append([Record(b"a"), Record(b"b")])
    log.roll()
    assert log.segments == [0, 2]
    log.append([Record(b"c")])
    assert _vals(log.fetch().records) == [b"a", b"b", b"c"]
    names = sorted(os.listdir(log.path))
    for suffix in (".log", ".index", ".timeindex", ".dlyindex"):
        assert "00000000000000000000" + suffix in names
    assert "00000000000000000002.log" in names


def test_roll_on_segment_bytes_and_segment_ms(open_log, clock):
    log = open_log(segment_bytes=500, segment_ms=1000)
    log.append([Record(b"x" * 300)])
    log.append([Record(b"x" * 300)])  # would pass 500 bytes: new segment first
    assert log.segments == [0, 1]
    log.append([Record(b"x" * 2000)])  # bigger than a segment: goes alone into a new one
    assert log.segments == [0, 1, 2]
    clock.advance(999)
    log.append([Record(b"y")])  # segment 2 is too big anyway
    log2_segs = log.segments
    clock.advance(1000)
    log.append([Record(b"z")])  # the active segment's first batch is now 1000 ms old
    assert len(log.segments) == len(log2_segs) + 1


# ---------------------------------------------------------------------------- clock

def test_log_clock_never_runs_backwards(open_log, clock, log_dir):
    log = open_log()
    clock.advance(100)
    log.append([Record(b"a")])
    clock.advance(-50)
    res = log.append([Record(b"b")])
    assert res.append_time == T0 + 100 and res.deliver_after == T0 + 100
    assert log.fetch().next == DeliveryKey(T0 + 100, 1)
    log.close()
    # nor across a clean restart: the cursor above must stay behind every new record
    log = open_log()
    res = log.append([Record(b"c")])
    assert res.deliver_after == T0 + 100
    assert _vals(log.fetch(DeliveryKey(T0 + 100, 1)).records) == [b"c"]


def test_log_clock_never_runs_backwards_across_threads(log_dir):
    """now() reads the clock without the log's lock: threads switching as often as the
    interpreter lets them, over a clock that jumps back and forth, each see it never go
    back, and it ends at the largest reading."""
    readings = itertools.cycle(range(T0, T0 + 50))  # rises, then falls back 49 ms
    log = Log.open(log_dir, clock=lambda: next(readings))
    seen: list[list[int]] = [[] for _ in range(4)]

    def read(out: list[int]) -> None:
        for _ in range(3_000):
            out.append(log.now())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read, args=(out,)) for out in seen]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    for out in seen:
        assert all(a <= b for a, b in itertools.pairwise(out)), "the clock ran backwards"
    assert log.now() == T0 + 49
    log.close()


# ---------------------------------------------------------------------------- errors

BAD_BATCHES = [
    "not a list",
    [],
    [b"raw bytes"],
    [Record("str value")],
    [Record(bytearray(b"x"))],  # None is a tombstone (docs/api.md); other non-bytes are not
    [Record(b"ok"), Record(123)],
    [Record(b"v", key="k")],
    [Record(b"v", key=1)],
    [Record(b"v", headers=[("h", "str")])],
    [Record(b"v", headers=[(b"h", b"x")])],
    [Record(b"v", headers="h")],
    [Record(b"v", timestamp=-1)],
    [Record(b"v", timestamp=1.5)],
    [Record(b"v", deliver_after=-1)],
    [Record(b"v", deliver_after=True)],
    [Record(b"v", deliver_after=1.0)],
    [Record(b"v", deliver_after="1")],
]


@pytest.mark.parametrize("batch", BAD_BATCHES, ids=range(len(BAD_BATCHES)))
def test_bad_batches_write_nothing(open_log, batch):
    log = open_log()
    log.append([Record(b"first")])
    before = _sizes(log.path)
    with pytest.raises(InvalidRecordError):
        log.append(batch)
    assert log.log_end_offset == 1 and _sizes(log.path) == before
    assert _vals(log.read(0)) == [b"first"]


@pytest.mark.parametrize("da", [-1, True, 1.5, "5", T0 * 1.0])
def test_bad_explicit_deliver_after(open_log, da):
    log = open_log()
    with pytest.raises(InvalidRecordError):
        log.append([Record(b"v")], deliver_after=da)
    assert log.log_end_offset == 0 and _sizes(log.path) == {"00000000000000000000.log": 0}


def test_max_batch_bytes(open_log):
    log = open_log(max_batch_bytes=1000)
    log.append([Record(b"x" * 800)])
    before = _sizes(log.path)
    with pytest.raises(InvalidRecordError):
        log.append([Record(b"x" * 1000)])
    with pytest.raises(InvalidRecordError):
        log.append([Record(b"x" * 100)] * 10)
    assert log.log_end_offset == 1 and _sizes(log.path) == before


def test_max_delivery_delay(open_log, clock):
    log = open_log(max_delivery_delay_ms=60_000)
    assert log.append([Record(b"ok")], deliver_after=T0 + 60_000).deliver_after == T0 + 60_000
    size = _sizes(log.path)
    with pytest.raises(DeliveryDelayExceededError, match="60000"):
        log.append([Record(b"no")], deliver_after=T0 + 60_001)
    with pytest.raises(DeliveryDelayExceededError, match="60000"):
        log.append([Record(b"a"), Record(b"no", deliver_after=T0 + 70_000)])
    # the delay is measured from the record's timestamp
    with pytest.raises(DeliveryDelayExceededError, match="60000"):
        log.append([Record(b"old", timestamp=T0 - 10_000)], deliver_after=T0 + 55_000)
    assert log.log_end_offset == 1 and _sizes(log.path) == size
    with pytest.raises(InvalidRecordError):  # it is an InvalidRecordError too
        log.append([Record(b"no")], deliver_after=T0 + 10**9)
    log.append([Record(b"fine", deliver_after=T0 + 59_000)])
    assert log.log_end_offset == 2


def test_delayed_delivery_disabled(open_log, clock):
    log = open_log(delayed_delivery_enable=False)
    log.append([Record(b"plain")])
    for kwargs, batch in (({"deliver_after": T0 + 5}, [Record(b"x")]),
                          ({"deliver_after": 0}, [Record(b"x")]),
                          ({}, [Record(b"x", deliver_after=T0 + 5)]),
                          ({}, [Record(b"y"), Record(b"x", deliver_after=1)])):
        with pytest.raises(DelayedDeliveryDisabledError):
            log.append(batch, **kwargs)
    assert log.log_end_offset == 1
    assert _vals(log.fetch().records) == [b"plain"]


@pytest.mark.parametrize("cfg", [
    {"segment_bytes": 0}, {"segment_ms": -1}, {"index_interval_bytes": 0},
    {"max_delivery_delay_ms": -1}, {"retention_ms": -2}, {"retention_bytes": -5},
    {"flush_messages": 0}, {"flush_ms": 0}, {"max_batch_bytes": 0},
    {"segment_bytes": "1"}, {"delayed_delivery_enable": 1}, {"retention_ms": 1.5},
])
def test_bad_config(cfg):
    with pytest.raises(KdelayError):
        LogConfig(**cfg)


def test_closed_log_refuses(open_log):
    log = open_log()
    log.append([Record(b"x")])
    log.close()
    log.close()  # idempotent
    for call in (lambda: log.append([Record(b"y")]), log.fetch, lambda: log.read(0),
                 log.roll, log.flush, log.enforce_retention):
        with pytest.raises(KdelayError):
            call()


def test_context_manager_closes_cleanly(log_dir, clock):
    with Log.open(log_dir, clock=clock) as log:
        log.append([Record(b"x")])
    assert log.closed
    with Log.open(log_dir, clock=clock) as log:
        assert log.load_report.clean
        assert _vals(log.read(0)) == [b"x"]


def test_flush_messages(open_log):
    log = open_log(flush_messages=2)
    log.append([Record(b"a")])
    log.append([Record(b"b")])
    log.flush()
    assert log.log_end_offset == 2


# ---------------------------------------------------------------------------- retention

def test_retention_ms_counts_from_due_time(open_log, clock):
    log = open_log(retention_ms=1000)
    log.append([Record(b"old")])                            # due T0
    log.roll()
    log.append([Record(b"delayed")], deliver_after=T0 + 5000)  # due T0 + 5000
    log.roll()
    log.append([Record(b"active")])
    clock.advance(1000)
    assert log.enforce_retention() == 0  # exactly retention_ms: not yet "passed"
    clock.advance(1)
    assert log.enforce_retention() == 1
    assert log.segments == [1, 2] and log.log_start_offset == 1
    # the delayed segment was written long ago, but it became due only at T0 + 5000
    clock.t = T0 + 5000 + 1000
    assert log.enforce_retention() == 0
    assert _vals(log.fetch(DeliveryKey(T0, 0)).records) == [b"active", b"delayed"]
    clock.advance(1)
    assert log.enforce_retention() == 1
    assert log.segments == [2]
    assert not os.path.exists(os.path.join(log.path, "00000000000000000001.log"))
    assert not os.path.exists(os.path.join(log.path, "00000000000000000001.dlyindex"))
    # the active segment is never deleted
    clock.advance(10**9)
    assert log.enforce_retention() == 0
    assert [r.offset for r in log.read(0)] == [2]


def test_retention_uses_latest_due_record(open_log, clock):
    log = open_log(retention_ms=100)
    log.append([Record(b"a")])
    log.append([Record(b"b")], deliver_after=T0 + 10_000)
    log.append([Record(b"c")])
    log.roll()
    clock.advance(5000)
    assert log.enforce_retention() == 0  # b not even due yet
    clock.t = T0 + 10_100
    assert log.enforce_retention() == 0
    clock.advance(1)
    assert log.enforce_retention() == 1


def test_retention_bytes_never_deletes_pending(open_log, clock):
    log = open_log(retention_bytes=1, retention_ms=-1)
    log.append([Record(b"x" * 100)], deliver_after=T0 + 1000)
    log.roll()
    log.append([Record(b"y" * 100)])
    log.roll()
    log.append([Record(b"z")])
    assert log.enforce_retention() == 0  # oldest is pending: nothing behind it may go
    clock.advance(1000)
    assert log.enforce_retention() == 2
    assert log.segments == [2]


def test_retention_bytes_stops_under_limit(open_log, clock):
    log = open_log(retention_bytes=10_000, retention_ms=-1)
    for _ in range(5):
        log.append([Record(b"x" * 3000)])
        log.roll()
    total = sum(_sizes(log.path).values())
    assert total > 10_000
    deleted = log.enforce_retention()
    assert deleted >= 1
    assert sum(_sizes(log.path).values()) <= 10_000
    assert sum(_sizes(log.path).values()) + 3100 > 10_000  # deleted no more than needed


def test_retention_disabled(open_log, clock):
    log = open_log(retention_ms=-1)
    log.append([Record(b"a")])
    log.roll()
    clock.advance(10**12)
    assert log.enforce_retention() == 0


def test_retention_survives_reopen(open_log, clock, log_dir):
    log = open_log(retention_ms=10)
    log.append([Record(b"a")])
    log.roll()
    log.append([Record(b"b")])
    clock.advance(11)
    assert log.enforce_retention() == 1
    log.close()
    log = open_log(retention_ms=10)
    assert log.log_start_offset == 1 and log.log_end_offset == 2
    assert _vals(log.fetch().records) == [b"b"]
    assert _vals(log.read(0)) == [b"b"]


def test_no_duplicate_after_roll_mid_batch(open_log, clock):
    """Seen once (against an in-progress fetch-resume change) by the model test: a cursor
    inside a batch, a roll that seals it, then pages that cross into the new segment."""
    log = open_log(segment_bytes=150, index_interval_bytes=1)
    log.append([Record(b"v0-"), Record(b"v1-")])
    res = log.fetch(max_records=1, max_bytes=1)
    log.append([Record(b"v2-")])
    log.roll()
    seen = [r.offset for r in res.records]
    for max_records, max_bytes in ((1, 1), (2, 300), (5, 1 << 20)):
        res = log.fetch(res.next, max_records=max_records, max_bytes=max_bytes)
        seen += [r.offset for r in res.records]
    assert seen == [0, 1, 2]


def test_append_listeners_see_every_append_outside_the_lock(open_log):
    log = open_log()
    seen = []

    def try_lock():
        got = log._lock.acquire(blocking=False)
        if got:
            log._lock.release()
        seen.append(got)

    def listener(result):
        # outside the log's lock: another thread can take it meanwhile
        t = threading.Thread(target=try_lock)
        t.start()
        t.join()
        seen.append(result.base_offset)

    log.add_append_listener(listener)
    log.append([Record(b"a"), Record(b"b")])
    log.append([Record(b"c")])
    assert seen == [True, 0, True, 2]
    with pytest.raises(InvalidRecordError):
        log.append([])
    assert seen == [True, 0, True, 2]  # a refused append notifies nobody


def _pack(items: list) -> PackedBinary:
    return PackedBinary(np.array([-1 if x is None else len(x) for x in items], np.int32),
                        b"".join(x for x in items if x is not None))


def test_append_columns_writes_what_append_of_records_writes(tmp_path_factory):
    """The columnar append is the record append without Record objects: same results, same
    bytes on disk, for any mix of null and non-null keys, values and timestamps; and so is
    the packed one (PackedBinary columns, an int64 timestamp array), whenever every record
    has a timestamp or none has."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    blob = st.one_of(st.none(), st.binary(max_size=20))
    batch = st.integers(1, 30).flatmap(lambda n: st.tuples(
        st.lists(blob, min_size=n, max_size=n), st.none() | st.lists(blob, min_size=n, max_size=n),
        st.none() | st.lists(st.none() | st.integers(T0 - 10_000, T0 + 10_000),
                             min_size=n, max_size=n),
        st.none() | st.integers(T0, T0 + 10_000)))

    @settings(max_examples=40, deadline=None)
    @given(batches=st.lists(batch, min_size=1, max_size=5))
    def check(batches):
        root = tmp_path_factory.mktemp("cols")
        a = Log.open(str(root / "records"), clock=lambda: T0)
        b = Log.open(str(root / "columns"), clock=lambda: T0)
        c = Log.open(str(root / "packed"), clock=lambda: T0)
        try:
            for values, keys, ts, da in batches:
                if ts is not None and None in ts:
                    ts = [T0 if t is None else t for t in ts]  # packed: no null stamps
                recs = [Record(v, key=None if keys is None else keys[i],
                               timestamp=None if ts is None else ts[i])
                        for i, v in enumerate(values)]
                want = a.append(recs, deliver_after=da)
                assert want == b.append_columns(values, keys=keys, timestamps=ts,
                                                deliver_after=da)
                assert want == c.append_columns(
                    _pack(values), keys=None if keys is None else _pack(keys),
                    timestamps=None if ts is None else np.array(ts, np.int64),
                    deliver_after=da)
        finally:
            a.close()
            b.close()
            c.close()
        for name in os.listdir(root / "records"):
            if name.endswith(".log"):
                want = (root / "records" / name).read_bytes()
                assert want == (root / "columns" / name).read_bytes()
                assert want == (root / "packed" / name).read_bytes()

    check()
