"""Crash points over every file operation of a compaction (rewrite to .cleaned, the swap),
in three crash models; after each crash, recovery must leave every replaced range exactly
as it was or exactly as compaction made it (never neither, never both), and the log must
open, serve its records and take appends."""

from __future__ import annotations

import os
import shutil

import pytest

from kdelay import Log, LogConfig
from kdelay.log.compaction import swap
from kdelay.testing.compaction_model import (
    HOUR,
    T0,
    Clock,
    Model,
    compact_offline,
    read_dir,
    records,
)
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash
from kdelay.testing.seeds import stable_seed

CFG = LogConfig(segment_bytes=600, index_interval_bytes=64, retention_ms=HOUR)
NOW = T0 + 2 * HOUR


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A closed log whose sealed segments compact into two groups (one merging several
    segments, with cancelled records split out of their batches), and the expected result."""
    path = str(tmp_path_factory.mktemp("tpl") / "p")
    m = Model()
    log = Log.open(path, config=CFG, clock=Clock())
    for i in range(30):
        da = 30 * 24 * HOUR if i % 7 == 0 else (0 if i < 20 else 3 * HOUR)
        m.append(log, records(3, f"r{i}", headers=i % 2 == 0), T0 + da)
    log.roll()
    log.close()
    cancelled = {o for o in m.rows if o % 11 == 5}
    done = str(tmp_path_factory.mktemp("done") / "p")
    shutil.copytree(path, done)
    assert compact_offline(done, CFG, NOW, cancelled=cancelled, min_ratio=0.3) >= 3
    return path, m, cancelled, read_dir(path), read_dir(done)


def _ranges(directory):
    """[base, end) of each segment now in `directory` (end: next base, or marker's end)."""
    bases = sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))
    return list(zip(bases, bases[1:] + [1 << 62], strict=True))


def _check(path, m, before, after, where):
    got = read_dir(path)  # every batch intact, offsets strictly increasing: no duplicates
    for lo, hi in _ranges(path):
        part = {o: r for o, r in got.items() if lo <= o < hi}
        old = {o: r for o, r in before.items() if lo <= o < hi}
        new = {o: r for o, r in after.items() if lo <= o < hi}
        assert part in (old, new), f"{where}: segment {lo} is neither the old nor the new"
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))], where
    log = Log.open(path, config=CFG, clock=Clock(T0 + 31 * 24 * HOUR))
    try:
        page = log.fetch(None, max_records=10_000)
        assert [(r.deliver_after, r.offset) for r in page.records] == \
            sorted((r[4], o) for o, r in got.items()), where
        res = log.append(records(1, "after"), deliver_after=T0)
        assert res.base_offset == max(m.rows) + 1
    finally:
        log.close()


def _run(tmp_path, template, point, mode):
    src, m, cancelled, before, after = template
    path = str(tmp_path / f"c-{point}-{mode}")
    shutil.copytree(src, path)
    inj = FaultInjector([path], crash_at=point, seed=stable_seed("compaction", point, mode))
    crashed = False
    with inj:
        try:
            compact_offline(path, CFG, NOW, cancelled=cancelled, min_ratio=0.3)
        except SimulatedCrash:
            crashed = True
    if crashed:
        # offline compaction closes its descriptors on the way out (finally blocks)
        inj.apply_crash(mode)
    notes = swap.recover(path)
    _check(path, m, before, after, f"op {point} {mode} {notes}")
    return len(inj.ops), crashed


def test_every_crash_point(tmp_path, template):
    total, crashed = _run(tmp_path, template, None, "process")
    assert not crashed and total >= 20
    for point in range(total):
        for mode in CRASH_MODES:
            _, crashed = _run(tmp_path, template, point, mode)
            assert crashed, f"op {point} of {total} not reached"
    print(f"compaction: {total} crash points x {len(CRASH_MODES)} modes")


def test_recover_without_marker_uses_the_log(tmp_path, template):
    """A committed swap whose marker is unreadable still completes: the merged range ends
    where the rewritten log's last offset says."""
    src, m, cancelled, before, after = template
    path = str(tmp_path / "p")
    shutil.copytree(src, path)
    real_finish = swap._finish
    calls = []

    def stop_after_commit(directory, base, others):
        calls.append(base)
        raise SimulatedCrash("after the commit point")
    swap._finish = stop_after_commit
    try:
        with pytest.raises(SimulatedCrash):
            compact_offline(path, CFG, NOW, cancelled=cancelled, min_ratio=0.3)
    finally:
        swap._finish = real_finish
    base = calls[0]
    with open(os.path.join(path, f"{base:020d}.compacted.swap"), "wb") as f:
        f.write(b"garbage")
    notes = swap.recover(path)
    assert any("index header" in n for n in notes)
    assert swap.read_marker(path, base) is not None
    _check(path, m, before, after, "marker damaged")
