"""Crash points of a queue group: every file operation of poll (acquisition journal),
ack, release, reject (with its dead-letter append), compaction into a snapshot, group
creation, and leaving (a member's close, then the Log's close under another member, which
closes the group's state) is made the last thing the machine did, under kill -9, power
loss and torn writes. After each crash the group must open, no record whose ack or reject
returned may come back, every other record must (with a delivery count between the last
durable one and the last handed out), and every record whose reject returned must be in
the dead letter log."""

from __future__ import annotations

import os

import pytest

from kdelay import Log, LogConfig, QueueConsumer, Record
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned
from kdelay.testing.seeds import stable_seed

T0 = 1_700_000_000_000
N = 14
MIN_POINTS = {"work": 40, "create": 8, "close": 20}


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


class Tracker:
    """Drives a QueueConsumer and keeps what the caller was told."""

    def __init__(self, q: QueueConsumer):
        self.q = q
        self.count: dict[int, int] = {}      # latest delivery count handed out
        self.returned: dict[int, int] = {}   # count as of the last call that returned
        self.durable: dict[int, int] = {}    # count as of the last fsync'd call
        self.finished: set[int] = set()      # ack or reject returned
        self.maybe_finished: set[int] = set()
        self.rejected: set[int] = set()
        self.in_poll = False

    def poll(self, n: int, consumer: QueueConsumer | None = None):
        """`n` records polled by `consumer` (default: the tracked one; another member of
        the same group shares its state)."""
        part = self.q._parts[0]
        before = {o for o, e in part.inflight.items() if e.holder is None}
        # records at the limit are dead-lettered by this poll instead of delivered
        self.maybe_finished = {o for o in before
                               if part.inflight[o].count >= self.q.max_delivery_count}
        self.in_poll = True  # a crash now may leave any record acquired once more
        recs = (consumer or self.q).poll(max_records=n)
        self.in_poll = False
        self.maybe_finished = set()
        for r in recs:
            self.count[r.offset] = r.delivery_count
        limited = before - set(part.inflight) - {r.offset for r in recs}
        self.finished |= limited
        self.returned = dict(self.count)
        if limited:
            self.durable = dict(self.count)  # a reject is fsync'd with the poll's entries
        return recs

    def _durable_call(self, fn, recs, finish: bool, reject: bool = False):
        if finish:
            self.maybe_finished = {r.offset for r in recs}
        fn(recs)
        self.maybe_finished = set()
        if finish:
            self.finished |= {r.offset for r in recs}
        if reject:
            self.rejected |= {r.offset for r in recs}
        self.returned = dict(self.count)
        self.durable = dict(self.count)  # the fsync covers every earlier journal write

    def ack(self, recs):
        self._durable_call(self.q.ack, recs, True)

    def reject(self, recs):
        self._durable_call(self.q.reject, recs, True, reject=True)

    def release(self, recs, delay_ms=0):
        self._durable_call(lambda r: self.q.release(r, delay_ms=delay_ms), recs, False)


def _prepare(path: str, dl_path: str, create: bool):
    clock = Clock()
    log = Log.open(path, config=LogConfig(flush_messages=1), clock=clock)
    for i in range(N):
        log.append([Record(b"v%d" % i, key=b"k%d" % i)], deliver_after=T0 + i)
    clock.t = T0 + N
    dl = Log.open(dl_path, config=LogConfig(), clock=clock)
    q = QueueConsumer(log, "g", max_delivery_count=3, dead_letter=dl, compact_min_bytes=400)
    t = Tracker(q)
    if not create:
        first = t.poll(3)
        t.ack(first[:1])
    return clock, log, dl, t


def _act_work(clock, t: Tracker) -> None:
    r = t.poll(3)
    t.ack(r[:1])
    t.release(r[1:2], delay_ms=100)
    t.reject(r[2:3])
    r = t.poll(4)
    t.q.renew(r[:2])
    t.release(r)
    r = t.poll(6)                # redeliveries first, then new records
    t.ack(r[:2])
    t.release(r[2:], delay_ms=5)
    clock.t += 200
    r = t.poll(10)
    t.release(r[:3])
    r = t.poll(3)                # third deliveries; the fourth will be dead-lettered
    t.release(r)
    t.poll(20)                   # dead-letters what exceeds max_delivery_count
    t.ack(t.poll(2)[:0])


def _act_create(clock, t: Tracker) -> None:
    r = t.poll(2)
    t.ack(r[:1])
    t.release(r[1:])


def _act_close(clock, t: Tracker) -> None:
    """Members leave holding records: one closes (its close releases them: one journal
    write), then the Log closes under another member that holds some too (closing the
    group's state, then the log's clean close)."""
    r = t.poll(4)
    t.ack(r[:1])
    t.release(r[1:2], delay_ms=5)
    other = QueueConsumer(t.q.source, "g", max_delivery_count=3, compact_min_bytes=400)
    assert len(t.poll(2, other)) == 2
    t.q.close()
    t.q.source.close()


SCENARIOS = {"work": (False, _act_work), "create": (True, _act_create),
             "close": (False, _act_close)}


def run_point(tmp_path, name: str, point: int | None, mode: str) -> tuple[int, bool]:
    create, act = SCENARIOS[name]
    base = tmp_path / f"{name}-{point}-{mode}"
    path, dl_path = str(base / "p-0"), str(base / "dl-0")
    clock, log, dl, t = _prepare(path, dl_path, create)
    inj = FaultInjector([path, dl_path], crash_at=point, seed=stable_seed(name, point, mode))
    crashed = False
    with inj:
        try:
            act(clock, t)
        except SimulatedCrash:
            crashed = True
    for part in t.q._parts:
        part.store.close()
    close_abandoned(log)
    close_abandoned(dl)
    if crashed:
        inj.apply_crash(mode)
    check(path, dl_path, t, mode, f"{name} op {point} {mode}")
    return len(inj.ops), crashed


def check(path: str, dl_path: str, t: Tracker, mode: str, where: str) -> None:
    clock = Clock(T0 + 10**6)
    with Log.open(path, config=LogConfig(), clock=clock) as log:
        q = QueueConsumer(log, "g", max_delivery_count=100)
        got = q.poll(max_records=1000)
        seen = [r.offset for r in got]
        assert len(seen) == len(set(seen)), f"{where}: a record offered twice"
        must = set(range(N)) - t.finished - t.maybe_finished
        assert must <= set(seen), f"{where}: lost {sorted(must - set(seen))}"
        back = set(seen) & t.finished
        assert not back, f"{where}: finished records came back: {sorted(back)}"
        lower = t.returned if mode == "process" else t.durable
        for r in got:
            c = r.delivery_count - 1  # what the group had counted before this delivery
            hi = t.count.get(r.offset, 0) + t.in_poll
            lo = min(lower.get(r.offset, 0), hi)
            assert lo <= c <= hi, f"{where}: offset {r.offset} count {c} not in [{lo}, {hi}]"
        q.ack(got)
        q.close()
    with Log.open(path, config=LogConfig(), clock=clock) as log:
        q = QueueConsumer(log, "g")
        assert q.poll(max_records=1000) == [], f"{where}: acks after recovery did not hold"
        q.close()
    with Log.open(dl_path, config=LogConfig(), clock=clock) as dl:
        copies = {r.value for r in dl.read(0, max_records=1000)}
        want = {b"v%d" % o for o in t.rejected}
        assert want <= copies, f"{where}: rejected but not dead-lettered: {want - copies}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_queue_crash_point(tmp_path, name: str) -> None:
    total, crashed = run_point(tmp_path, name, None, "process")
    assert not crashed
    for point in range(total):
        for mode in CRASH_MODES:
            _, crashed = run_point(tmp_path, name, point, mode)
            assert crashed, f"{name}: op {point} of {total} not reached"
    print(f"queue {name}: {total} crash points x {len(CRASH_MODES)} modes")
    assert total >= MIN_POINTS[name], f"{name}: only {total} ops seen"


def test_scenario_compacts_and_dead_letters(tmp_path) -> None:
    """The work scenario really reaches compaction and the dead-letter limit (else the
    crash points above would not cover them)."""
    path, dl_path = str(tmp_path / "p-0"), str(tmp_path / "dl-0")
    clock, log, dl, t = _prepare(path, dl_path, False)
    _act_work(clock, t)
    assert t.q._parts[0].store.generation >= 1
    assert t.q._parts[0].rejected > 1  # one reject() plus the limit
    assert len(dl.read(0, max_records=100)) == t.q._parts[0].rejected
    t.q.close()
    log.close()
    dl.close()
