"""Crash points of cancel and reschedule: every file operation they (and the rolls, flushes
and closes around them) perform is made the last one, under kill -9, power loss and torn
power loss. After each crash: an acknowledged cancel holds, an acknowledged reschedule has
moved the record, and of a reschedule in flight exactly one of original and copy is ever
delivered; every other acknowledged record is delivered; records appended after the crash
(reusing offsets a crash took away) are not mistaken for cancelled ones; a clean reopen
agrees."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from conftest import T0
from conftest import FakeClock as Clock

from kdelay import Log, LogConfig, Record
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned
from kdelay.testing.seeds import stable_seed

FAR = T0 + 10 ** 9


@dataclass
class Model:
    values: dict[int, bytes] = field(default_factory=dict)
    durable: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)  # acknowledged
    maybe_cancelled: set[int] = field(default_factory=set)  # in flight at the crash
    # (original, copy offset, acknowledged)
    moves: list[tuple[int, int, bool]] = field(default_factory=list)
    flushed_policy: bool = True

    def append(self, log: Log, n: int, da: int) -> None:
        base = log.log_end_offset
        recs = [Record(b"v%d" % (base + i), key=b"k") for i in range(n)]
        for i in range(n):  # before the call: a crash inside it may leave the batch
            self.values[base + i] = recs[i].value
        res = log.append(recs, deliver_after=da)
        assert res.base_offset == base
        if self.flushed_policy:
            self.durable.update(range(base, base + n))

    def cancel(self, log: Log, offsets: list[int]) -> None:
        live = [o for o in offsets if o not in self.cancelled]
        self.maybe_cancelled |= set(live)
        n = log.cancel(offsets)
        assert n == len(live)
        if self.flushed_policy:
            self.cancelled |= set(live)
            self.maybe_cancelled -= set(live)

    def reschedule(self, log: Log, offset: int, da: int) -> None:
        copy = log.log_end_offset
        self.values[copy] = self.values[offset]
        self.moves.append((offset, copy, False))
        res = log.reschedule(offset, da)
        assert res.base_offset == copy
        if self.flushed_policy:
            self.moves[-1] = (offset, copy, True)
            self.durable.add(copy)

    def flush(self, log: Log) -> None:
        log.flush()
        self.flushed_policy = True
        self.cancelled |= self.maybe_cancelled
        self.maybe_cancelled.clear()
        self.moves = [(o, c, True) for o, c, _ in self.moves]
        self.durable |= set(self.values)


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _prep(path: str, m: Model, cfg: LogConfig) -> Log:
    log = Log.open(path, config=cfg, clock=Clock())
    for i in range(6):
        m.append(log, 3, T0 + 1000 + i)
    log.flush()
    m.durable |= set(m.values)
    return log


def _act_cancel(log: Log, m: Model) -> Log:
    m.cancel(log, [1])
    m.cancel(log, [4, 5, 16])  # spans segments
    m.append(log, 2, T0 + 2000)
    m.cancel(log, [18, 2])
    log.roll()
    m.cancel(log, [19, 7])
    log.close()
    return log


def _act_reschedule(log: Log, m: Model) -> Log:
    m.reschedule(log, 0, T0 + 5000)
    m.reschedule(log, 9, T0 + 500)
    m.cancel(log, [3])
    m.reschedule(log, 18, T0 + 7000)  # a copy of a copy's neighbour; rolls on its own
    m.reschedule(log, 19, T0 + 100)  # moves the first copy again
    log.close()
    return log


def _act_unflushed(log: Log, m: Model) -> Log:
    m.flushed_policy = False
    m.cancel(log, [2, 6])
    m.reschedule(log, 10, T0 + 3000)
    m.flush(log)
    m.flushed_policy = False
    m.reschedule(log, 11, T0 + 3000)
    m.cancel(log, [12])
    m.flush(log)
    log.close()
    return log


SCENARIOS = {
    "cancel": (dict(flush_messages=1, segment_bytes=400), _act_cancel, 25),
    "reschedule": (dict(flush_messages=1, segment_bytes=500), _act_reschedule, 25),
    "unflushed": (dict(flush_messages=None, segment_bytes=1 << 20), _act_unflushed, 12),
}


def _check(path: str, m: Model, cfg: LogConfig, where: str) -> None:
    clock = Clock(FAR)
    log = Log.open(path, config=cfg, clock=clock)
    try:
        first = _delivered(log)
        present = {r.offset: r.value for r in log.read(0, max_records=10 ** 6)}
        for o in m.durable:
            assert o in present, f"{where}: acknowledged record {o} lost"
        for o, v in present.items():
            assert m.values.get(o) == v, f"{where}: record {o} invented"
        for o in m.cancelled:
            assert o not in first, f"{where}: acknowledged cancel of {o} not kept"
        settled = set(m.cancelled)
        for orig, copy, acked in m.moves:
            if acked:
                assert orig not in first and (copy in first or _moved_on(m, copy)), \
                    f"{where}: move {orig}->{copy}"
            if copy in present:
                # (a copy that was moved on itself counts as its original here)
                assert (orig in first) + (copy in first or _moved_on(m, copy)) == 1, \
                    f"{where}: move {orig}->{copy}: original {orig in first}, " \
                    f"copy {copy in first}"
            else:
                assert orig in first or _moved_on(m, orig), \
                    f"{where}: move {orig}->{copy} lost both"
            settled |= {orig, copy}
        for o in present:
            if o not in settled and o not in m.maybe_cancelled:
                assert o in first, f"{where}: record {o} not delivered"
        # records appended after the crash reuse any lost offsets: none is cancelled
        end = log.log_end_offset
        log.append([Record(b"after-%d" % i) for i in range(4)], deliver_after=FAR)
        new = set(_delivered(log)) - set(first)
        assert new == set(range(end, end + 4)), f"{where}: post-crash appends {new}"
        final = set(first) | new
    finally:
        log.close()
    log = Log.open(path, config=cfg, clock=clock)
    try:
        assert log.load_report.clean
        assert set(_delivered(log)) == final, f"{where}: clean reopen disagrees"
    finally:
        log.close()


def _moved_on(m: Model, offset: int) -> bool:
    return any(o == offset for o, _, _ in m.moves)


def _delivered(log: Log) -> dict[int, bytes]:
    out, after = {}, None
    while True:
        res = log.fetch(after, max_records=5)
        if not res.records:
            return out
        for r in res.records:
            assert r.offset not in out
            out[r.offset] = r.value
        after = res.next


def _run(tmp_path, name: str, point: int | None, mode: str) -> tuple[int, bool]:
    kw, act, _ = SCENARIOS[name]
    cfg = LogConfig(index_interval_bytes=64, **kw)
    path = os.fspath(tmp_path / f"{name}-{point}-{mode}")
    m = Model()
    log = _prep(path, m, cfg)
    inj = FaultInjector([path], crash_at=point, seed=stable_seed(name, point, mode))
    crashed = False
    with inj:
        try:
            act(log, m)
        except SimulatedCrash:
            crashed = True
    close_abandoned(log)
    if crashed:
        inj.apply_crash(mode)
    _check(path, m, cfg, f"{name} op {point} {mode}")
    return len(inj.ops), crashed


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_crash_point(tmp_path, name):
    total, crashed = _run(tmp_path, name, None, "process")
    assert not crashed
    assert total >= SCENARIOS[name][2], f"only {total} ops"
    for point in range(total):
        for mode in CRASH_MODES:
            _, crashed = _run(tmp_path, name, point, mode)
            assert crashed, f"{name}: op {point} of {total} not reached"


def test_write_ahead_order_of_a_reschedule(tmp_path):
    """The MOVE is durable before the copy's bytes are written; the CONFIRM is written only
    after the .log holding the copy was fsynced (flush policy: none, so only flush() does)."""
    path = os.fspath(tmp_path / "p")
    cfg = LogConfig(flush_messages=None)
    m = Model()
    log = _prep(path, m, cfg)
    with FaultInjector([path]) as inj:
        log.reschedule(4, T0 + 9000)
        after_move = len(inj.ops)
        log.flush()
    close_abandoned(log)
    ops = [(op, os.path.basename(p).split(".")[-1]) for op, p in inj.ops]
    first_log_write = ops.index(("write", "log"))
    assert ("write", "cancels") in ops[:first_log_write]
    assert ops.index(("fsync", "cancels")) < first_log_write  # MOVE durable first
    assert ("write", "cancels") not in ops[first_log_write:after_move]  # no early CONFIRM
    confirm = ops.index(("write", "cancels"), after_move)
    assert ops.index(("fsync", "log"), after_move) < confirm


@pytest.mark.parametrize("keep", ["journal", "log"])
def test_files_lost_independently(tmp_path, keep):
    """Power loss where one file's unsynced tail reached the disk and the other's did not:
    keep the journal's entries but lose the copy's bytes (the original must come back), or
    keep the copy and lose the journal's unsynced entries (nothing to lose: the MOVE was
    synced before the copy was written, so the original stays cancelled)."""
    path = os.fspath(tmp_path / "p")
    cfg = LogConfig(flush_messages=None)
    m = Model()
    log = _prep(path, m, cfg)
    seg_log = os.path.join(path, f"{0:020d}.log")
    journal = os.path.join(path, f"{0:020d}.cancels")
    log_size = os.path.getsize(seg_log)
    log.reschedule(4, T0 + 9000)
    log.cancel([5])
    journal_synced = os.path.getsize(journal) - 32  # the CANCEL was not fsynced
    close_abandoned(log)
    if keep == "journal":
        os.truncate(seg_log, log_size)
    else:
        os.truncate(journal, journal_synced)
    clock = Clock(FAR)
    with Log.open(path, config=cfg, clock=clock) as log:
        got = _delivered(log)
        assert (4 in got) == (keep == "journal")
        assert (18 in got) == (keep == "log")
        assert 5 in got if keep == "log" else 5 not in got
