"""Stateful property test: two QueueConsumers of one group against a plain model of the
work-queue contract.

The model keeps, per offset, whether it is new (never delivered), held (by which consumer,
its lock expiry and its place in due order), available (from when), or finished, plus its
delivery count. Steps: appends (due now or later), polls, acks, releases with a delay,
rejects, renews, bad calls (which must raise and change nothing), clock moves that make
locks run out, clean reopens, and reopens of a copy taken while the group was live (a
crash: held records come back with their counts). Every poll must return exactly the
records the model says, in order, with their counts; metrics must agree after every step.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import hypothesis.strategies as st
from conftest import T0, FakeClock
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kdelay import KdelayError, Log, QueueConsumer, Record, fsio
from kdelay.testing.faults import close_abandoned

LOCK_MS = 1000
MAX_DELIVERIES = 3


class QueueModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="kdelay-qmodel-")
        self.generation = 0
        self.clock = FakeClock(T0)
        self.floor = T0
        self.da: dict[int, int] = {}           # offset -> deliver_after
        self.count: dict[int, int] = {}        # offset -> deliveries so far
        self.place: dict[int, int] = {}        # offset -> its time in the group's order
        self.holder: dict[int, tuple[int, int]] = {}  # offset -> (consumer, lock until)
        self.finished: set[int] = set()
        self.acked = 0
        self.dead = 0                          # records in the dead-letter log
        self.held_recs: list[dict[int, object]] = [{}, {}]  # per consumer: offset -> rec
        self._real = fsio.fsync, fsio.fsync_dir
        fsio.fsync = fsio.fsync_dir = lambda _x: None  # durability is test_queue_crash's

    def _dir(self, name: str) -> str:
        return os.path.join(self.root, f"gen{self.generation}", name)

    def _open(self) -> None:
        self.log = Log.open(self._dir("p-0"), clock=self.clock)
        self.dl = Log.open(self._dir("dl-0"), clock=self.clock)
        self.qs = [QueueConsumer(self.log, "g", lock_ms=LOCK_MS,
                                 max_delivery_count=MAX_DELIVERIES, dead_letter=self.dl,
                                 compact_min_bytes=self.compact) for _ in range(2)]

    def _now(self) -> int:
        self.floor = max(self.floor, self.clock.t)
        return self.floor

    @initialize(compact=st.sampled_from([0, 300, 1 << 20]))
    def start(self, compact: int) -> None:
        self.compact = compact
        self._open()

    def teardown(self) -> None:
        try:
            for q in getattr(self, "qs", []):
                q.close()
            for log in (getattr(self, "log", None), getattr(self, "dl", None)):
                if log is not None and not log.closed:
                    log.close()
        finally:
            fsio.fsync, fsio.fsync_dir = self._real
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ the model

    def _lock_live(self, off: int, now: int) -> bool:
        return off in self.holder and self.holder[off][1] >= now

    def _offered(self, now: int) -> list[tuple[int, int]]:
        """(time, offset) of every record a poll may take now, in order."""
        out = []
        for off, da in self.da.items():
            if off in self.finished or self._lock_live(off, now):
                continue
            t = self.place.get(off, da)
            if t <= now:
                out.append((t, off))
        return sorted(out)

    def _release_model(self, off: int, at: int) -> None:
        self.holder.pop(off, None)
        self.place[off] = at

    # ------------------------------------------------------------------ rules

    @rule(n=st.integers(1, 4), delay=st.sampled_from([0, 0, 300, 2500]))
    def append(self, n: int, delay: int) -> None:
        now = self._now()
        res = self.log.append([Record(b"v%d" % (len(self.da) + i)) for i in range(n)],
                              deliver_after=now + delay)
        for off in range(res.base_offset, res.last_offset + 1):
            self.da[off] = res.deliver_after

    @rule(c=st.integers(0, 1), n=st.sampled_from([1, 2, 5, 100]))
    def poll(self, c: int, n: int) -> None:
        now = self._now()
        chosen = self._offered(now)[:n]
        want = []
        for t, off in chosen:
            self.place[off] = t
            if self.count.get(off, 0) + 1 > MAX_DELIVERIES:
                self.finished.add(off)
                self.holder.pop(off, None)
                self.dead += 1
                continue
            self.count[off] = self.count.get(off, 0) + 1
            prev = self.holder.get(off)
            if prev is not None:
                self.held_recs[prev[0]].pop(off, None)
            self.holder[off] = (c, now + LOCK_MS)
            want.append((off, self.count[off]))
        got = self.qs[c].poll(max_records=n)
        assert [(r.offset, r.delivery_count) for r in got] == want
        for r in got:
            assert r.value == b"v%d" % r.offset and r.deliver_after == self.da[r.offset]
            self.held_recs[c][r.offset] = r

    def _mine(self, c: int, data) -> list:
        now = self._now()
        live = [r for off, r in sorted(self.held_recs[c].items())
                if self.holder.get(off, (None,))[0] == c and self._lock_live(off, now)]
        if not live:
            return []
        how = data.draw(st.sampled_from(["all", "one", "some"]))
        if how == "all":
            return live
        if how == "one":
            return [data.draw(st.sampled_from(live))]
        keep = data.draw(st.lists(st.booleans(), min_size=len(live), max_size=len(live)))
        return [r for r, k in zip(live, keep, strict=True) if k]

    @rule(c=st.integers(0, 1), data=st.data())
    def ack(self, c: int, data) -> None:
        recs = self._mine(c, data)
        self.qs[c].ack(recs)
        for r in recs:
            self.finished.add(r.offset)
            self.holder.pop(r.offset)
            del self.held_recs[c][r.offset]
        self.acked += len(recs)

    @rule(c=st.integers(0, 1), data=st.data())
    def reject(self, c: int, data) -> None:
        recs = self._mine(c, data)
        self.qs[c].reject(recs)
        for r in recs:
            self.finished.add(r.offset)
            self.holder.pop(r.offset)
            del self.held_recs[c][r.offset]
        self.dead += len(recs)

    @rule(c=st.integers(0, 1), delay=st.sampled_from([0, 1, 700, 3000]), data=st.data())
    def release(self, c: int, delay: int, data) -> None:
        recs = self._mine(c, data)
        now = self._now()
        self.qs[c].release(recs, delay_ms=delay)
        for r in recs:
            self._release_model(r.offset, now + delay)
            del self.held_recs[c][r.offset]

    @rule(c=st.integers(0, 1), data=st.data())
    def renew(self, c: int, data) -> None:
        recs = self._mine(c, data)
        now = self._now()
        self.qs[c].renew(recs)
        for r in recs:
            self.holder[r.offset] = (c, now + LOCK_MS)

    @rule(c=st.integers(0, 1), verb=st.sampled_from(["ack", "release", "reject", "renew"]),
          data=st.data())
    def bad_call(self, c: int, verb: str, data) -> None:
        """Records this consumer does not hold (now): stale, expired or the other's."""
        now = self._now()
        stale = [r for off, r in self.held_recs[c].items()
                 if not (self.holder.get(off, (None,))[0] == c and self._lock_live(off, now)
                         and self.count[off] == r.delivery_count)]
        stale += [r for off, r in self.held_recs[1 - c].items()
                  if self.holder.get(off, (None,))[0] == 1 - c]
        if not stale:
            return
        bad = data.draw(st.sampled_from(stale))
        good = self._mine(c, data)
        journal = os.path.join(self.log.path, "queues", "g.journal")
        size = os.path.getsize(journal) if os.path.exists(journal) else None
        try:
            getattr(self.qs[c], verb)(good + [bad])
        except KdelayError:
            pass
        else:
            raise AssertionError(f"{verb} of a record not held did not raise")
        assert (os.path.getsize(journal) if os.path.exists(journal) else None) == size

    @rule(ms=st.sampled_from([1, 400, 999, 1000, 1001, 3000]))
    def clock_forward(self, ms: int) -> None:
        self.clock.advance(ms)

    def _forget_holders(self) -> None:
        """After a restart nobody holds anything: held records are available at their
        place, with their counts."""
        self.holder.clear()
        self.held_recs = [{}, {}]

    @rule()
    def reopen_clean(self) -> None:
        for q in self.qs:
            q.close()
        self.log.close()
        self.dl.close()
        self._forget_holders()
        self._open()

    @precondition(lambda self: self.generation < 3)
    @rule()
    def crash_copy(self) -> None:
        """Copy the directories while the group is live (kill -9: the page cache is
        there), drop the originals as a dead process would, and go on with the copy."""
        src = os.path.join(self.root, f"gen{self.generation}")
        self.generation += 1
        shutil.copytree(src, os.path.join(self.root, f"gen{self.generation}"))
        for q in self.qs:
            for part in q._parts:
                part.store.close()
                part.closed = True
        close_abandoned(self.log)
        close_abandoned(self.dl)
        self._forget_holders()
        self.clock.t = max(self.clock.t, self.floor)
        self._open()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def metrics_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        now = self._now()
        m = self.log.metrics()["queues"].get("g")
        if m is None:
            assert not self.count
            return
        acquired = sum(1 for off in self.holder if self._lock_live(off, now))
        delayed = sum(1 for off, t in self.place.items() if off not in self.finished
                      and not self._lock_live(off, now) and t > now)
        available = len(self._offered(now))
        assert (m["acquired"], m["delayed"], m["available"], m["acked"]) == \
            (acquired, delayed, available, self.acked)
        assert len(self.dl.read(0, max_records=10_000)) == self.dead


QueueModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("KDELAY_MODEL_EXAMPLES", "40")), stateful_step_count=40,
    deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestQueueModel = QueueModel.TestCase
