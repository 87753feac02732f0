"""fetch.lag.due_after against a record-by-record count."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay.fetch.lag import due_after

batches = st.lists(st.tuples(st.integers(0, 8), st.integers(1, 4)), max_size=30)
keys = st.lists(st.one_of(st.none(), st.tuples(st.integers(-1, 9), st.integers(-1, 90))),
                max_size=5)


def _columns(batches: list[tuple[int, int]]) -> tuple[list, list[np.ndarray]]:
    """(rows, columns) of batches given as (deliver_after, record count), offsets in order,
    the columns sorted by (deliver_after, base offset) as an index holds them."""
    rows, offset = [], 0
    for da, n in batches:
        rows.append((da, offset, n - 1))
        offset += n
    rows.sort()
    cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
    if not rows:
        cols = [np.empty(0, np.int64)] * 3
    return rows, cols


@settings(max_examples=200, deadline=None)
@given(batches=batches, now=st.integers(-1, 9), keys=keys)
def test_due_after_counts_records_one_by_one(batches, now, keys):
    rows, cols = _columns(batches)
    records = [(da, base + k) for da, base, lod in rows for k in range(lod + 1)]
    want = [sum(1 for r in records if r[0] <= now and (key is None or r > key))
            for key in keys]
    assert due_after(*cols, now, keys) == want


@settings(max_examples=300, deadline=None)
@given(batches=batches, now=st.integers(-1, 9), keys=keys, data=st.data())
def test_due_after_leaves_cancelled_records_out(batches, now, keys, data):
    rows, cols = _columns(batches)
    records = [(da, base + k) for da, base, lod in rows for k in range(lod + 1)]
    # some of the log's offsets, and some no batch holds (compacted away)
    gone = data.draw(st.sets(st.integers(0, len(records) + 3)))
    cancelled = np.array(sorted(gone), dtype=np.int64)
    want = [sum(1 for r in records
                if r[0] <= now and (key is None or r > key) and r[1] not in gone)
            for key in keys]
    assert due_after(*cols, now, keys, cancelled) == want
