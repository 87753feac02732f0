"""The due-order view against a model: delivery offsets only grow, every due record is
numbered exactly once and never before it is due, cancelled records take none, and the
numbering survives restarts and kill -9 (the process dies; the page cache survives), with
reads at any delivery offset serving exactly the numbered records as v2 batches."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from view_support import T0, FakeClock, decode_served, numbering

from kdelay import Log, LogConfig, Record
from kdelay.broker.delivery_view import DeliveryView
from kdelay.errors import OffsetOutOfRangeError
from kdelay.testing.faults import close_abandoned

OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(-50, 400)),
    st.tuples(st.just("cancel"), st.integers(0, 1000)),
    st.tuples(st.just("advance"), st.integers(0, 300)),
    st.tuples(st.just("extend")),
    st.tuples(st.just("read"), st.integers(0, 1000), st.integers(1, 600)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("kill")),
    st.tuples(st.just("roll")),
)


class Model:
    """Records by offset (deliverAfter), cancelled offsets, and the numbering so far."""

    def __init__(self) -> None:
        self.due_at: dict[int, int] = {}
        self.cancelled: set[int] = set()
        self.numbered: list[int] = []  # log offsets in delivery-offset order

    def number(self, now: int) -> None:
        """What numbering at `now` must add: the due records not numbered yet, in key
        order, every one of them after every record numbered before."""
        done = set(self.numbered)
        new = sorted((da, off) for off, da in self.due_at.items()
                     if da <= now and off not in self.cancelled and off not in done)
        if self.numbered and new:
            last = self.numbered[-1]
            assert (self.due_at[last], last) < new[0], "a record came due behind one numbered"
        self.numbered += [off for _, off in new]


class Harness:
    def __init__(self, path: str):
        self.path = path
        self.clock = FakeClock(T0)
        self.model = Model()
        self.log = Log.open(path, config=LogConfig(), clock=self.clock)
        self.view = DeliveryView.open(self.log)

    def check(self) -> None:
        """The view numbers exactly what the model says, each record no earlier than due."""
        got = numbering(self.view)
        want = {off: n for n, off in enumerate(self.model.numbered)}
        assert got == want
        assert self.view.high_watermark == len(self.model.numbered)
        for off in got:
            assert self.model.due_at[off] <= self.clock.t

    def apply(self, op: tuple) -> None:
        kind = op[0]
        m = self.model
        if kind == "append":
            _, n, delay = op
            first = self.log.log_end_offset
            r = self.log.append([Record(b"%d" % (first + i)) for i in range(n)],
                                deliver_after=max(0, self.clock.t + delay))
            for off in range(r.base_offset, r.last_offset + 1):
                m.due_at[off] = r.deliver_after
        elif kind == "cancel":
            if m.due_at:
                off = sorted(m.due_at)[op[1] % len(m.due_at)]
                pending = m.due_at[off] > self.clock.t and off not in m.cancelled
                assert self.log.cancel(off) == int(pending)
                if pending:
                    m.cancelled.add(off)
        elif kind == "advance":
            self.clock.advance(op[1])
        elif kind == "extend":
            self.view.extend()
            m.number(self.clock.t)
            self.check()
        elif kind == "read":
            self.read(op[1], op[2])
        elif kind in ("restart", "kill"):
            self.view.close()
            if kind == "restart":
                self.log.close()
            else:
                close_abandoned(self.log)
            self.log = Log.open(self.path, config=LogConfig(), clock=self.clock)
            self.view = DeliveryView.open(self.log)
            self.check()  # nothing numbered is lost, nothing is numbered by opening
        elif kind == "roll":
            self.log.roll()

    def read(self, pick: int, max_bytes: int) -> None:
        self.view.extend()
        self.model.number(self.clock.t)
        hw = self.view.high_watermark
        n = pick % (hw + 2)
        if n > hw:
            try:
                self.view.read(n, max_bytes)
            except OffsetOutOfRangeError:
                return
            raise AssertionError("a read past the high watermark was answered")
        records = decode_served(self.view.read(n, max_bytes))
        if n == hw:
            assert records == []
            return
        assert records, "a read below the high watermark served nothing"
        offsets = [r[1] for r in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert records[0][0] <= n <= max(o for b, o, *_ in records if b == records[0][0])
        served = [o for o in offsets if o >= n]
        assert served == list(range(n, n + len(served)))  # no gaps: nothing was removed
        for _, delivery, _, value, _, _ in records:
            assert int(value) == self.model.numbered[delivery]

    def close(self) -> None:
        self.view.close()
        self.log.close()


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, max_size=40))
def test_view_matches_the_model(tmp_path_factory, ops) -> None:
    h = Harness(os.fspath(tmp_path_factory.mktemp("view") / "t-0"))
    try:
        for op in ops:
            h.apply(op)
        h.clock.advance(1000)  # everything comes due
        h.apply(("extend",))
        h.apply(("read", 0, 1 << 20))
        assert sorted(h.model.numbered) == sorted(set(h.model.due_at) - h.model.cancelled)
    finally:
        h.close()


def test_a_batch_with_cancelled_records_is_served_without_them(tmp_path) -> None:
    h = Harness(os.fspath(tmp_path / "t-0"))
    try:
        h.apply(("append", 1, 0))
        h.apply(("append", 4, 100))
        h.apply(("cancel", 2))  # offset 2, the middle of the second batch
        h.apply(("advance", 100))
        h.apply(("extend",))
        rows = h.view._rows[:h.view._n]
        assert rows["count"].tolist() == [1, 1, 2]  # a run either side of the cancelled one
        records = decode_served(h.view.read(0, 1 << 20))
        assert [(r[1], int(r[3])) for r in records] == [(0, 0), (1, 1), (2, 3), (3, 4)]
        assert [r[0] for r in records] == [0, 1, 1, 1]  # one re-encoded batch from 1
    finally:
        h.close()


def _served_values(view, n: int = 0) -> dict[int, bytes]:
    return {r[1]: r[3] for r in decode_served(view.read(n, 1 << 20)) if r[1] >= n}


def test_compaction_and_retention_keep_every_delivery_offset(tmp_path) -> None:
    """Compaction rewrites a segment without its cancelled records, then removes records
    due long ago; retention deletes a segment: every record left keeps its delivery
    offset, the removed ones leave gaps, and a read at a gap starts at the next record."""
    clock = FakeClock(T0)
    cfg = LogConfig(retention_ms=5000, compaction_min_ratio=0.2)
    log = Log.open(os.fspath(tmp_path / "t-0"), config=cfg, clock=clock)
    try:
        def batch(tag: str, n: int, due: int) -> None:
            log.append([Record(b"%s%d" % (tag.encode(), i)) for i in range(n)],
                       deliver_after=due)

        batch("a", 10, T0 + 10)                # offsets 0..9
        batch("p", 10, T0 + 100_000)           # 10..19, pending; most cancelled
        batch("b", 5, T0 + 20)                 # 20..24
        log.roll()
        batch("c", 3, T0 + 30)                 # 25..27
        assert log.cancel([11, 12, 13, 15, 16, 17, 18, 19]) == 8
        view = DeliveryView.open(log)
        clock.advance(50)
        view.extend()
        before = _served_values(view)
        assert [before[d] for d in range(18)] == [
            *(b"a%d" % i for i in range(10)), *(b"b%d" % i for i in range(5)),
            *(b"c%d" % i for i in range(3))]
        assert log.compact().segments_rewritten >= 1  # the cancelled records go
        assert _served_values(view) == before
        clock.advance(100_000)  # p0 and p4 come due; a, b, c are due long enough ago
        view.extend()
        assert _served_values(view, 18) == {18: b"p0", 19: b"p4"}
        log.roll()
        log.enforce_retention()  # compacts: a and b leave segment 0, p0 and p4 stay
        after = _served_values(view, view.log_start)
        assert {18: b"p0", 19: b"p4"}.items() <= after.items()
        assert after.items() <= {**before, 18: b"p0", 19: b"p4"}.items()
        assert not set(range(15)) & set(after)  # a and b are gone: gaps
        assert view.high_watermark == 20
        got = _served_values(view, 5)  # a read at a gap starts at the next record
        assert got == {d: v for d, v in after.items() if d >= 5}
        view.close()
    finally:
        log.close()
