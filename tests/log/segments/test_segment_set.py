"""SegmentSet: segments by base offset, sealed ones by largest key, and rolls."""

from __future__ import annotations

import os

import pytest
from conftest import T0

from kdelay.log.batch import codec
from kdelay.log.segments.recovery_point import read_recovery_point
from kdelay.log.segments.segment import LogSegment
from kdelay.log.segments.segment_set import SegmentSet


def _append(seg: LogSegment, n: int, da: int) -> None:
    base = seg.next_offset
    batch = codec.encode_batch(base_offset=base, base_timestamp=T0, deliver_after=da,
                               keys=[None] * n, values=[b"v"] * n)
    seg.tail.append(batch, base, n - 1, da, T0, 1)


@pytest.fixture
def segs(tmp_path):
    """Three segments: [0, 2) due at T0+50, [2, 5) due at T0+10 and T0+90, [5, 6) active."""
    d = os.fspath(tmp_path)
    s = SegmentSet(d, [LogSegment.create(d, 0)])
    _append(s.active, 2, T0 + 50)
    s.roll()
    _append(s.active, 1, T0 + 10)
    _append(s.active, 2, T0 + 90)
    s.roll()
    _append(s.active, 1, T0 + 5)
    yield s
    for seg in s:
        seg.close()


def test_by_base_offset(segs):
    assert segs.bases() == [0, 2, 5] and len(segs) == 3
    assert segs.oldest.base_offset == 0 and segs.active.base_offset == 5
    assert [segs.segment_for(o).base_offset for o in range(7)] == [0, 0, 2, 2, 2, 5, 5]
    assert segs.next_after(segs[0]) is segs[2] and segs.next_after(segs.active) is None
    assert [s.base_offset for s in segs.between(0, 5)] == [0, 2]
    assert [segs.deliver_after_of(o) for o in range(7)] == \
        [T0 + 50, T0 + 50, T0 + 10, T0 + 90, T0 + 90, T0 + 5, None]


def test_sealed_by_largest_key(segs):
    assert [s.base_offset for s in segs.sealed_after(None)] == [0, 2]
    assert [s.base_offset for s in segs.sealed_after((T0 + 50, 1))] == [2]
    assert [s.base_offset for s in segs.sealed_after((T0 + 50, 0))] == [0, 2]
    assert [s.base_offset for s in segs.sealed_after((T0 + 90, 4))] == []
    assert [s.base_offset for s in segs.sealed_not_all_due(T0 + 50)] == [2]
    assert [s.base_offset for s in segs.sealed_not_all_due(T0 + 90)] == []


def test_roll_persists_and_moves_the_recovery_point(segs):
    assert read_recovery_point(segs.directory) == 5
    assert not segs.active_tail.rolls_before(10, T0, segment_bytes=1 << 20, segment_ms=1000)
    assert segs.active_tail.rolls_before(1 << 20, T0, segment_bytes=1 << 20, segment_ms=1000)
    assert segs.active_tail.rolls_before(10, T0 + 1000, segment_bytes=1 << 20, segment_ms=1000)
    segs.roll()
    assert segs.bases() == [0, 2, 5, 6] and read_recovery_point(segs.directory) == 6
    assert [s.base_offset for s in segs.sealed_after((T0 + 4, 0))] == [5, 0, 2]
    assert not segs.active_tail.rolls_before(1 << 30, T0 + 10**6, segment_bytes=1, segment_ms=1)  # empty


def test_remove_oldest_never_takes_the_active_one(segs):
    first = segs.remove_oldest()
    first.close()
    assert segs.bases() == [2, 5]
    assert [s.base_offset for s in segs.sealed_after(None)] == [2]
    segs.remove_oldest().close()
    with pytest.raises(ValueError):
        segs.remove_oldest()


def test_min_deliver_after_follows_appends_persists_and_rolls(segs):
    assert [segs[b].min_deliver_after for b in (0, 2, 5)] == [T0 + 50, T0 + 10, T0 + 5]
    active = segs.active
    active.persist_indexes()  # as a clean close leaves it: every entry persisted
    assert active.min_deliver_after == T0 + 5
    _append(active, 1, T0 + 1)  # an append after the answer was kept
    assert active.min_deliver_after == T0 + 1
    segs.roll()
    assert segs[5].min_deliver_after == T0 + 1
    assert segs.active.min_deliver_after is None
    _append(segs.active, 1, T0 + 7)
    assert segs.active.min_deliver_after == T0 + 7
