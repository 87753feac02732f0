"""The small fetch's path (fetch/active_page.py, recent_windows.due_entries) against the
general one (planner.py + due_merge.py) and against a model: the same records, the same
`next`, and the same first entry not due where the page says it saw it, for every cursor (a page's
`next`, any record's key, keys that are not due yet or lie between records), page limit,
byte cap, cancellation and tail length; and None (the general path) wherever it cannot
answer alone."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record
from kdelay.fetch import planner
from kdelay.fetch.active_page import NEVER, active_page
from kdelay.fetch.due_merge import read_page, window_limit
from kdelay.index import recent_entries
from kdelay.index.recent_columns import RecentColumns
from kdelay.index.recent_windows import due_entries
from kdelay.records import DeliveryKey


def _general(log: Log, cursor, now: int, max_records: int, max_bytes: int):
    state = planner.merge_state(log._segments, planner.ResumePoints(), cursor, now,
                                window_limit(max_records), log._cancels)
    return read_page(state, cursor, now, max_records, max_bytes, log._cancels)


def _cursors(log: Log, data) -> list:
    """None, every record's key, and keys beside them (between records, not yet due)."""
    page = log.read(0, max_records=10_000)
    keys = [DeliveryKey(r.deliver_after, r.offset) for r in page]
    out = [None, *keys[:30]]
    for k in keys[:10]:  # (a cursor's offset is >= 0: validation.as_delivery_key)
        out.append(DeliveryKey(k.deliver_after, max(0, k.offset - 1)))
        out.append(DeliveryKey(k.deliver_after - 1, 10**9))
    out.append(DeliveryKey(data.draw(st.integers(0, 5_000)), data.draw(st.integers(0, 200))))
    return out


BATCHES = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 3_000)), min_size=0,
                   max_size=60)


@settings(max_examples=40, deadline=None)
@given(batches=BATCHES, tail=st.sampled_from([1, 3, 4096]), cancel=st.lists(
    st.integers(0, 150), max_size=8), data=st.data())
def test_same_page_as_the_general_path(tmp_path_factory, batches, tail, cancel, data):
    saved = recent_entries._TAIL
    recent_entries._TAIL = tail  # merged order, tail, or both
    try:
        _compare_paths(tmp_path_factory.mktemp("active"), batches, cancel, data)
    finally:
        recent_entries._TAIL = saved


def _compare_paths(path, batches, cancel, data) -> None:
    t = [1_000]
    with Log.open(path, config=LogConfig(), clock=lambda: t[0]) as log:
        for i, (n, delay) in enumerate(batches):
            t[0] = 1_000 + i
            log.append([Record(b"v%d" % j, key=b"k") for j in range(n)],
                       deliver_after=t[0] + delay)
        if cancel:
            log.cancel(cancel)
        t[0] = 1_000 + data.draw(st.integers(0, 3_500))
        now = log.now()
        answered = 0
        for cursor in _cursors(log, data):
            max_records = data.draw(st.integers(1, 12))
            max_bytes = data.draw(st.sampled_from([1, 200, 1 << 20]))
            with log._lock:
                small = active_page(log._segments, cursor, now, max_records, max_bytes,
                                    log._cancels)
                general = _general(log, cursor, now, max_records, max_bytes)
            if small is None:
                continue
            answered += 1
            records, nxt, until = small
            assert records == general.records
            assert nxt == general.next
            if not records:
                assert until == (NEVER if general.next_pending is None
                                 else general.next_pending)
            elif until is not None:  # a quiet spell after the page: nothing after it is due
                with log._lock:
                    after = _general(log, nxt, now, max_records, 1 << 20)
                assert after.records == []
                assert until == (NEVER if after.next_pending is None else after.next_pending)
        if batches and not cancel:
            assert answered  # (the small path answers at least the cursors past the due ones)


def test_general_path_when_a_sealed_segment_holds_more(tmp_path):
    t = [1_000]
    with Log.open(tmp_path, config=LogConfig(), clock=lambda: t[0]) as log:
        log.append([Record(b"a")], deliver_after=1_000)
        log.roll()
        log.append([Record(b"b")], deliver_after=1_000)
        with log._lock:
            assert active_page(log._segments, None, 1_000, 10, 1 << 20, log._cancels) is None
            key = DeliveryKey(1_000, 0)  # past everything the sealed segment holds
            records, nxt, _ = active_page(log._segments, key, 1_000, 10, 1 << 20,
                                          log._cancels)
        assert [r.value for r in records] == [b"b"] and nxt == DeliveryKey(1_000, 1)


def test_general_path_after_a_clean_reopen(tmp_path):
    t = [1_000]
    with Log.open(tmp_path, config=LogConfig(), clock=lambda: t[0]) as log:
        log.append([Record(b"a")], deliver_after=1_000)
    with Log.open(tmp_path, config=LogConfig(), clock=lambda: t[0]) as log, log._lock:
        # the active segment's entries are persisted columns now: not the small path's
        assert active_page(log._segments, None, 1_000, 10, 1 << 20, log._cancels) is None


ENTRIES = st.lists(st.tuples(st.integers(1, 3), st.integers(-20, 60)), min_size=0,
                   max_size=200)


@settings(max_examples=300, deadline=None)
@given(entries=ENTRIES, tail=st.sampled_from([1, 5, 64, 4096]), now=st.integers(-10, 70),
       cursor=st.one_of(st.none(), st.tuples(st.integers(-25, 70), st.integers(-1, 400))),
       cap=st.integers(0, 30))
def test_due_entries_matches_a_model(entries, tail, now, cursor, cap):
    cols = RecentColumns(tail)
    model = []  # (deliver_after, base_offset, position, last_offset_delta, size)
    base = pos = 0
    for n, da in entries:
        cols.add(da, base, pos, n - 1, 10 * n)
        model.append((da, base, pos, n - 1, 10 * n))
        base, pos = base + n, pos + 10 * n
    after_da, after_off = (-1, -1) if cursor is None else cursor
    if cursor is not None and after_off < 0:
        after_off = 0
    kept = sorted(e for e in model if cursor is None or e[0] > after_da or (
        e[0] == after_da and e[1] + e[3] > after_off))
    due = [e for e in kept if e[0] <= now]
    rest = [e for e in kept if e[0] > now]
    out = np.empty((5, cap + 1), np.int64)
    k, full = due_entries(cols, after_da, after_off if cursor is not None else -1, now, out)
    got = [tuple(int(x) for x in out[:, j]) for j in range(k)]
    if len(due) > cap:
        assert full and got == due[:cap]
    else:
        assert not full
        assert got == due + rest[:1]


def test_a_page_with_records_starts_a_quiet_spell_that_appends_end(tmp_path):
    t = [1_000]
    with Log.open(tmp_path, config=LogConfig(), clock=lambda: t[0]) as log:
        log.append([Record(b"a")], deliver_after=1_000)
        log.append([Record(b"later")], deliver_after=5_000)
        page = log.fetch()
        assert [r.value for r in page.records] == [b"a"]
        # the page reached the first entry not due (5,000): nothing after it before then
        assert log._due_order.gate.holds(page.next, 4_999)
        log.append([Record(b"b")], deliver_after=1_000)  # due now: ends the spell
        assert not log._due_order.gate.holds(page.next, 1_000)
        nxt = log.fetch(page.next)
        assert [r.value for r in nxt.records] == [b"b"]
        log.append([Record(b"c")], deliver_after=2_000)  # due sooner than 5,000
        t[0] = 2_000
        assert [r.value for r in log.fetch(nxt.next).records] == [b"c"]


def test_a_page_cut_at_its_limit_starts_no_quiet_spell(tmp_path):
    t = [1_000]
    with Log.open(tmp_path, config=LogConfig(), clock=lambda: t[0]) as log:
        log.append([Record(b"a"), Record(b"b")], deliver_after=1_000)
        page = log.fetch(max_records=1)
        assert [r.value for r in page.records] == [b"a"]
        assert not log._due_order.gate.holds(page.next, 1_000)  # b is due
        assert [r.value for r in log.fetch(page.next).records] == [b"b"]
