"""The numpy-backed recent DeliverAfterIndex entries against a plain sorted-list model."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay.index import int_column, recent_columns, recent_entries
from kdelay.index.recent_entries import RecentEntries


def model_rank(model: list, after) -> int:
    """The old definition: first entry that may hold a record with key > after."""
    if after is None:
        return 0
    da_c, off_c = after
    for k, e in enumerate(model):
        if (e[0], e[1]) > (da_c, off_c):
            if k > 0:
                p = model[k - 1]
                if p[0] == da_c and p[1] + p[3] > off_c:
                    return k - 1
            return k
    k = len(model)
    if k and model[-1][0] == da_c and model[-1][1] + model[-1][3] > off_c:
        return k - 1
    return k


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 40), st.integers(1, 5), st.integers(0, 30),
                  st.booleans()),
        st.tuples(st.just("query"), st.integers(-1, 45), st.integers(0, 400)),
    ),
    max_size=120)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(0, 2**40), st.sampled_from([3, 7, 4096]))
def test_matches_model(seq, base0, tail):
    old = recent_entries._TAIL
    recent_entries._TAIL = tail
    try:
        _run(seq, base0)
    finally:
        recent_entries._TAIL = old


def _run(seq, base0) -> None:
    r = RecentEntries()
    model: list = []
    nxt, pos = base0, 1000
    for op in seq:
        if op[0] == "add":
            _, da, count, size, gap = op
            if gap:  # an entry that does not follow its predecessor
                nxt += 3
                pos += 11
            r.cols.add(da, nxt, pos, count - 1, size + 7)
            model.append((da, nxt, pos, count - 1, size + 7))
            nxt += count
            pos += size + 7
            model.sort(key=lambda e: (e[0], e[1]))
        else:
            _, da_c, off_rel = op
            after = (da_c, base0 + off_rel)
            now = da_c
            _check_fetch_windows(r, model, after, now)  # (before anything merges the tail)
            r.cols.merge()  # the whole order, as a reader that merges the tail sees it
            k = r.order_start(after)
            assert k == model_rank(model, after)
            assert r.entry_rows(r.order[k:]) == model[k:]
            assert r.order_start(None) == 0
            assert r.entry_rows(r.order[r._rank(now, True):]) == [e for e in model if e[0] > now]
            assert r.count_not_due(now) == (sum(e[3] + 1 for e in model if e[0] > now),
                                            sum(1 for e in model if e[0] > now))
            later = [e[0] for e in model if e[0] > now]
            assert r.first_after(now) == (min(later) if later else None)
    assert len(r) == len(model)
    assert _rows(r.columns()) == model
    assert r.max_entry() == (model[-1] if model else None)
    assert r.min_deliver_after() == (min(e[0] for e in model) if model else None)
    cols = r.columns()
    assert [tuple(int(c[i]) for c in cols) for i in range(len(model))] == model


def _rows(cols) -> list[tuple]:
    return list(zip(*(c.tolist() for c in cols), strict=True))


def _check_fetch_windows(r: RecentEntries, model: list, after, now: int) -> None:
    """What a fetch takes (no merge of the tail): the merged order's window from
    order_start and the arrivals' window, together, are the entries holding a record past
    `after` that are due at `now`, in key order; each window ends with its first entry not
    due, if it has one."""
    past = [e for e in model if (e[0], e[1] + e[3]) > after]
    order_len = len(r.order)
    ordered, _ = r.window(r.order_start(after), now, len(model) + 1)
    arrivals = r.arrivals_window(after, now)
    assert len(r.order) == order_len  # neither merged the tail
    got = _rows(ordered) + _rows(arrivals)
    assert sorted(e for e in got if e[0] <= now) == [e for e in past if e[0] <= now]
    tail = {e for e in _rows(r.columns_of(np.arange(order_len, len(r), dtype=np.uint32)))}
    tail_late = [e for e in past if e in tail and e[0] > now]
    assert [e for e in _rows(arrivals) if e[0] > now] == tail_late[:1]
    limit = 2
    cut, more = r.window(r.order_start(after), now, limit)
    due = [e for e in _rows(cut) if e[0] <= now]
    assert more == (len(due) == limit and r.order_start(after) + limit < order_len)


def test_out_of_order_refused():
    r = RecentEntries()
    r.cols.add(5, 100, 0, 9, 50)
    try:
        r.cols.add(5, 105, 50, 0, 10)
    except ValueError:
        pass
    else:
        raise AssertionError("an overlapping entry was accepted")
    assert _rows(r.columns()) == [(5, 100, 0, 9, 50)]


def test_wide_values_widen_columns():
    r = RecentEntries()
    r.cols.add(1, 0, 0, 0, 10)
    r.cols.add(2, 1, 10, 2**33, 2**33)  # a last-offset-delta and size past uint32
    r.cols.add(0, 2**33 + 2, 2**33 + 10, 0, 5)
    assert _rows(r.columns()) == [(0, 2**33 + 2, 2**33 + 10, 0, 5), (1, 0, 0, 0, 10),
                                 (2, 1, 10, 2**33, 2**33)]


def test_order_is_a_snapshot():
    """Entries added (and merged) while a reader walks the order it took do not disturb
    what it sees."""
    r = RecentEntries()
    for i in range(100):
        r.cols.add(i % 10, i, i * 10, 0, 10)
    r.cols.merge()
    order = r.order
    first = r.entry_rows(order[:20])
    for i in range(100, 200):
        r.cols.add(i % 10, i, i * 10, 0, 10)
    r.cols.merge()
    rest = r.entry_rows(order[20:])
    assert len(first) + len(rest) == 100


def test_compact_per_entry():
    """The point of the structure: about 16 bytes per entry (growth slack aside), no Python
    object per entry."""
    r = RecentEntries()
    n = 100_000
    for i in range(n):
        r.cols.add(int(np.int64(i * 7919 % 1000)), i, i * 120, 0, 120)
    r.columns()  # merges the tail
    assert r.nbytes() <= 26 * n


def test_deliver_after_spread_beyond_int32():
    """deliverAfter is stored relative to the first in 4 bytes until a value is too far."""
    r = RecentEntries()
    das = [2**40, 5, 2**62, 2**40 - 2**33, 0, 2**40 + 1]
    for i, da in enumerate(das):
        r.cols.add(da, i, i * 10, 0, 10)
    assert [e[0] for e in _rows(r.columns())] == sorted(das)
    assert r.first_after(2**40) == 2**40 + 1
    assert r.min_deliver_after() == 0
    r.cols.merge()
    assert r.order_start((2**40, 0)) == 4  # past (2**40, offset 0), a 1-record batch
    assert r.count_not_due(2**40 - 1) == (3, 3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=300), st.data())
def test_merge_tail_is_a_stable_sort_of_order_and_tail(das, data):
    """recent_columns.merge_tail (galloping from where the last tail arrival went) against a
    stable sort of every arrival by deliverAfter: ties in arrival order."""
    m = data.draw(st.integers(0, len(das)))
    col = int_column.IntColumn(np.int32, relative=True)
    for v in das:
        col.append(v)
    keys = np.array(das, dtype=np.int64)
    order = np.argsort(keys[:m], kind="stable").astype(np.uint32)
    tail = (m + np.argsort(keys[m:], kind="stable")).astype(np.uint32)
    out = np.empty(len(das), dtype=np.uint32)
    recent_columns.merge_tail(col, order, tail, out)
    assert out.tolist() == np.argsort(keys, kind="stable").tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(-50, 50), st.integers(-2**40, 2**40),
                          st.integers(0, 2**62)), min_size=0, max_size=300), st.data())
def test_sorted_arrivals_is_a_stable_sort_by_deliver_after(das, data):
    """recent_columns.sorted_arrivals (the merge's radix sort of the tail) against numpy's
    stable argsort: every spread of deliverAfters (one radix pass to six), the column
    widened to int64 or not, any stretch of arrivals."""
    first = data.draw(st.integers(0, len(das)))
    end = data.draw(st.integers(first, len(das)))
    col = int_column.IntColumn(np.int32, relative=True)
    for v in das:
        col.append(v)
    keys = np.array(das, dtype=np.int64)
    got = recent_columns.sorted_arrivals(col, first, end)
    assert got.dtype == np.uint32
    assert got.tolist() == (first + np.argsort(keys[first:end], kind="stable")).tolist()
