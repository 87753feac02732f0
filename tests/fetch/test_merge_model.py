"""The heap merge (fetch/page_fill.pyx's KWayMerge, kept across pages by
fetch/planner.py's MergeCursor) against a model: every page is exactly the next records of
the log sorted by (deliverAfter, offset) after the cursor, due and not cancelled. Many
overlapping segments (rolled every few batches), cancellations, pages continuing across
appends, rolls, clean reopens (the lazy open) and a second reader on its own cursor."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import DeliveryKey, Log, LogConfig, Record

T0 = 1_000_000
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 6), st.integers(-20, 400)),
        st.tuples(st.just("tick"), st.integers(0, 150), st.just(0)),
        st.tuples(st.just("fetch"), st.integers(1, 15), st.just(0)),
        st.tuples(st.just("other"), st.integers(1, 15), st.just(0)),
        st.tuples(st.just("cancel"), st.integers(0, 10 ** 6), st.integers(1, 4)),
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    min_size=1, max_size=150)


class Model:
    """The log as a reader sees it: (deliverAfter, offset) of every record, and which are
    cancelled."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.cancelled: set[int] = set()

    def page(self, after: DeliveryKey | None, now: int, n: int) -> list[tuple[int, int]]:
        return sorted(k for k in self.keys
                      if (after is None or k > tuple(after)) and k[0] <= now
                      and k[1] not in self.cancelled)[:n]

    def cancel(self, offsets: list[int], now: int) -> int:
        by_offset = {o: da for da, o in self.keys}
        done = {o for o in offsets
                if o in by_offset and by_offset[o] > now and o not in self.cancelled}
        self.cancelled |= done
        return len(done)


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_every_page_is_the_models_next_records(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("merge")
    now = [T0]
    config = LogConfig(segment_bytes=400)  # a segment every few batches
    model = Model()
    cursors: dict[str, DeliveryKey | None] = {"fetch": None, "other": None}
    log = Log.open(path, config=config, clock=lambda: now[0])
    try:
        for op, a, b in ops:
            if op == "append":
                res = log.append([Record(b"v%d" % i) for i in range(a)],
                                 deliver_after=max(0, now[0] + b))
                model.keys += [(res.deliver_after, o)
                               for o in range(res.base_offset, res.last_offset + 1)]
            elif op == "tick":
                now[0] += a
            elif op == "roll":
                log.roll()
            elif op == "reopen":
                log.close()
                log = Log.open(path, config=config, clock=lambda: now[0])
            elif op == "cancel":
                if model.keys:
                    first = model.keys[a % len(model.keys)][1]
                    offsets = list(range(first, first + b))
                    assert log.cancel(offsets) == model.cancel(offsets, now[0])
            else:
                page = log.fetch(cursors[op], max_records=a)
                got = [(r.deliver_after, r.offset) for r in page.records]
                assert got == model.page(cursors[op], now[0], a)
                if got:
                    assert page.next == DeliveryKey(*got[-1])
                cursors[op] = page.next
        now[0] += 1_000
        for name in cursors:  # both readers drain the rest, in pages of 7
            while True:
                page = log.fetch(cursors[name], max_records=7)
                got = [(r.deliver_after, r.offset) for r in page.records]
                assert got == model.page(cursors[name], now[0], 7)
                if not got:
                    break
                cursors[name] = page.next
    finally:
        log.close()
