"""The merge across segments: resumed runs, parked segments, rolls and retention between
pages must never lose, repeat or reorder a record."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5), st.integers(-50, 2_000)),
        st.tuples(st.just("tick"), st.integers(0, 700), st.just(0)),
        st.tuples(st.just("fetch"), st.integers(1, 12), st.just(0)),
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("retention"), st.just(0), st.just(0)),
    ),
    min_size=1, max_size=120)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_following_next_across_parked_and_resumed_segments(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("merge")
    t = [1_000]
    cfg = LogConfig(segment_bytes=600, retention_ms=10_000)
    appended: dict[int, int] = {}
    delivered: list[tuple[int, int]] = []
    deleted_below = 0
    cursor = None
    with Log.open(path, config=cfg, clock=lambda: t[0]) as log:
        for op, a, b in ops:
            if op == "append":
                res = log.append([Record(b"x%d" % i) for i in range(a)],
                                 deliver_after=max(0, t[0] + b))
                for off in range(res.base_offset, res.last_offset + 1):
                    appended[off] = res.deliver_after
            elif op == "tick":
                t[0] += a
            elif op == "roll":
                log.roll()
            elif op == "retention":
                log.enforce_retention()
                deleted_below = log.log_start_offset
            else:
                page = log.fetch(cursor, max_records=a)
                for r in page.records:
                    assert r.deliver_after <= t[0]
                    delivered.append((r.deliver_after, r.offset))
                cursor = page.next
        t[0] += 10_000
        while True:
            page = log.fetch(cursor, max_records=7)
            if not page.records:
                break
            delivered.extend((r.deliver_after, r.offset) for r in page.records)
            cursor = page.next
    assert delivered == sorted(set(delivered)), "repeated or out of order"
    # Retention only removes segments whose records were all due long ago, which a consumer
    # following `next` has already been handed; everything else must come exactly once.
    expected = sorted((da, off) for off, da in appended.items() if off >= deleted_below)
    got_kept = [k for k in delivered if k[1] >= deleted_below]
    assert got_kept == expected


def test_rolls_between_pages_add_each_new_segment_once(tmp_path):
    t = [1_000]
    got = []
    cursor = None
    with Log.open(tmp_path, config=LogConfig(segment_bytes=600), clock=lambda: t[0]) as log:
        for i in range(60):
            log.append([Record(b"x" * 50)], deliver_after=t[0] + 100)
            if i % 3 == 0:
                log.roll()
            t[0] += 50
            page = log.fetch(cursor, max_records=3)
            got += [(r.deliver_after, r.offset) for r in page.records]
            cursor = page.next
        t[0] += 1_000
        got += [(r.deliver_after, r.offset) for r in log.fetch(cursor, max_records=1000).records]
        assert len(log.segments) > 15
    assert [off for _, off in got] == list(range(60))
    assert got == sorted(got)
