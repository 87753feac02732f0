"""kdelay/read_ranges.py: coalescing nearby reads, the one rule of the Spark readers,
compaction's copy and the queue group's redelivery reads."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kdelay.read_ranges import coalesce

# items as (gap before it, its length): in order, never overlapping
items = st.lists(st.tuples(st.integers(0, 300), st.integers(1, 200)), max_size=40)


def _layout(drawn: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    starts, ends, at = [], [], 0
    for gap, length in drawn:
        starts.append(at + gap)
        ends.append(at + gap + length)
        at = ends[-1]
    return starts, ends


@given(items, st.integers(1, 1000), st.one_of(st.none(), st.integers(0, 200)),
       st.lists(st.booleans(), max_size=40))
def test_reads_cover_every_item_in_order_within_the_limits(drawn, max_span, max_gap, apart):
    starts, ends = _layout(drawn)
    parted = np.array((apart + [False] * len(drawn))[:len(drawn)], dtype=bool)
    reads = coalesce(starts, ends, max_span=max_span, max_gap=max_gap, apart=parted)
    # every item once, in order, in consecutive non-empty reads
    assert [k for i, j in reads for k in range(i, j)] == list(range(len(drawn)))
    assert all(i < j for i, j in reads)
    for n, (i, j) in enumerate(reads):
        # within the span (one item longer than it is a read of its own), no gap too wide,
        # never across an item that must start a read
        assert j - i == 1 or ends[j - 1] - starts[i] <= max_span
        gaps = [starts[k] - ends[k - 1] for k in range(i + 1, j)]
        assert max_gap is None or all(g <= max_gap for g in gaps)
        assert not parted[i + 1:j].any()
        if n + 1 < len(reads):  # greedy: the next item would have broken a limit
            assert parted[j] or ends[j] - starts[i] > max_span or (
                max_gap is not None and starts[j] - ends[j - 1] > max_gap)


@given(st.lists(st.integers(0, 5000), unique=True, max_size=60))
def test_offsets_closer_than_the_span_share_a_read(offsets):
    """The queue group's use: records at offsets, each one offset long."""
    offsets.sort()
    reads = coalesce(offsets, [o + 1 for o in offsets], max_span=256)
    for i, j in reads:
        assert offsets[j - 1] - offsets[i] < 256
    for (i, j), (next_i, _) in zip(reads, reads[1:], strict=False):
        assert next_i == j and offsets[j] - offsets[i] >= 256


def test_nothing_to_read():
    assert coalesce([], [], max_span=10, max_gap=0) == []
