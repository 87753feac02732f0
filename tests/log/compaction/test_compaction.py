"""Compaction: the rewriter and the swap, against a model of which records survive."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig
from kdelay.log.batch.walker import iter_headers
from kdelay.log.compaction import compactor, removable, swap
from kdelay.log.segments.layout import LOG_SUFFIX, segment_bases, segment_file
from kdelay.testing.compaction_model import (
    HOUR,
    T0,
    Clock,
    Model,
    compact_offline,
    read_dir,
    records,
)

CFG = LogConfig(segment_bytes=2000, index_interval_bytes=100, retention_ms=HOUR)


def _build(path, plan_rows, cfg=CFG):
    """plan_rows: list of (n records, deliver_after offset from T0, headers?)."""
    m = Model()
    log = Log.open(path, config=cfg, clock=Clock())
    for i, (n, da, hdr) in enumerate(plan_rows):
        m.append(log, records(n, f"b{i}", headers=hdr), T0 + da)
    log.roll()
    log.close()
    return m


def _log_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f.endswith(".log"))


def _fetch_all(path, cfg, now):
    log = Log.open(path, config=cfg, clock=Clock(now))
    try:
        out, cur = [], None
        while True:
            page = log.fetch(cur, max_records=7)
            if not page.records:
                return out
            out += page.records
            cur = page.next
    finally:
        log.close()


@pytest.mark.parametrize("marker", [swap.Marker(5, 99), swap.Marker(5, 99, 0xdeadbeef),
                                    swap.Marker(5, 99, 0)])
def test_marker_roundtrip_and_damage(marker):
    raw = swap.encode_marker(marker)
    assert swap.decode_marker(raw, 5) == marker
    assert swap.decode_marker(raw, 6) is None  # names another segment
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0x01
        assert swap.decode_marker(bytes(bad), 5) in (None, marker)
    assert swap.decode_marker(raw[:-3], 5) is None
    assert swap.decode_marker(b"\xff" * 10, 5) is None


def test_pinned_segments_shrink_and_keep_pending(tmp_path):
    path = str(tmp_path / "p")
    # 99 % due at once, 1 % due in 30 days
    rows = [(5, 0, False) if i % 10 else (1, 30 * 24 * HOUR, False) for i in range(60)]
    m = _build(path, rows)
    before = read_dir(path)
    assert before == m.rows
    bytes_before = _log_bytes(path)
    now = T0 + 2 * HOUR
    n = compact_offline(path, CFG, now)
    assert n > 0
    after = read_dir(path)
    hz = now - HOUR
    assert after == {o: r for o, r in m.rows.items() if r[4] >= hz}
    # sealed segments merged: far fewer files, far fewer bytes
    assert _log_bytes(path) < bytes_before / 5
    assert len([f for f in os.listdir(path) if f.endswith(".log")]) <= 2
    # every survivor is fetched once it is due, in (deliverAfter, offset) order
    got = _fetch_all(path, CFG, T0 + 31 * 24 * HOUR)
    assert [(r.deliver_after, r.offset) for r in got] == sorted((r[4], o) for o, r in after.items())
    for r in got:
        assert (r.key, r.value, list(r.headers), r.timestamp) == after[r.offset][:4]
    # a compacted segment carries its marker; the active one is never rewritten
    markers = [f for f in os.listdir(path) if f.endswith(swap.MARKER_SUFFIX)]
    assert markers and all(not f.endswith((".cleaned", ".swap")) for f in os.listdir(path))


def test_nothing_removable_rewrites_nothing(tmp_path):
    path = str(tmp_path / "p")
    _build(path, [(3, 10 * HOUR, False)] * 30)
    listing = sorted(os.listdir(path))
    assert compact_offline(path, CFG, T0 + 2 * HOUR) == 0
    assert sorted(os.listdir(path)) == listing
    assert compact_offline(path, CFG, T0 + 2 * HOUR, min_ratio=0) == 0


def test_cancelled_records_split_batches_into_runs(tmp_path):
    path = str(tmp_path / "p")
    m = _build(path, [(8, 5 * HOUR, i % 2 == 0) for i in range(12)])
    offsets = sorted(m.rows)
    cancelled = {o for o in offsets if o % 3 == 1 or 40 <= o < 48}
    n = compact_offline(path, CFG, T0, cancelled=cancelled, min_ratio=0.3)
    assert n > 0
    after = read_dir(path)
    # every sealed segment has over 30 % of its bytes cancelled, so all are rewritten:
    # exactly the records not cancelled survive, byte for byte with their offsets
    assert set(after) == {o for o in m.rows if o not in cancelled}
    for o, r in after.items():
        assert r == m.rows[o]
    # each batch of 8 that lost some records is now one batch per run of contiguous
    # survivors; the batch wholly cancelled (40..47) is gone
    runs = [run for first in range(0, 96, 8)
            for run in _runs([o for o in range(first, first + 8) if o not in cancelled])]
    assert [(h.base_offset, h.last_offset) for h in _headers(path)] == runs
    got = _fetch_all(path, CFG, T0 + 6 * HOUR)
    assert [(r.deliver_after, r.offset) for r in got] == sorted((r[4], o) for o, r in after.items())


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """(first, last) of each run of consecutive offsets in a sorted list."""
    runs: list[tuple[int, int]] = []
    for o in offsets:
        if runs and runs[-1][1] == o - 1:
            runs[-1] = (runs[-1][0], o)
        else:
            runs.append((o, o))
    return runs


def _offsets(header) -> set[int]:
    return set(range(header.base_offset, header.last_offset + 1))


def _headers(path: str, base: int | None = None) -> list:
    """The batch headers of every .log in the directory (or of segment `base`), in order."""
    out = []
    for b in segment_bases(path) if base is None else [base]:
        name = segment_file(path, b, LOG_SUFFIX)
        fd = os.open(name, os.O_RDONLY)
        try:
            out += [h for _, h in iter_headers(fd, name, 0, os.fstat(fd).st_size)]
        finally:
            os.close(fd)
    return out


def test_batch_plan_counts_bytes():
    da = np.array([1, 5, 9], dtype=np.int64)
    src = compactor.Source(0, 30, 300, "x", [da, np.array([0, 10, 20]), np.array([0, 100, 200]),
                                               np.array([9, 9, 9], dtype=np.int32),
                                               np.array([100, 100, 100], dtype=np.int32)])
    bp = compactor.batch_plan(src, 5, lambda a, b: [12, 13, 20, 21, 22, 23, 24, 25, 26, 27,
                                                     28, 29])
    assert bp.drop.tolist() == [True, False, True]
    assert bp.removable_bytes == 100 + 20 + 100


def test_plan_groups_small_neighbours():
    def src(base, size, da):
        return compactor.Source(base, base + 10, size, "x", [
            np.array([da], dtype=np.int64), np.array([base]), np.array([0]),
            np.array([9], dtype=np.int32), np.array([size], dtype=np.int32)])
    # dirty, small clean, big clean, dirty, dirty
    sources = [src(0, 900, 0), src(10, 50, 100), src(20, 900, 100), src(30, 900, 0),
               src(40, 900, 0)]
    groups = compactor.plan(sources, horizon_ms=50, min_ratio=0.5, segment_bytes=1000)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [30, 40]]


ROW = st.tuples(st.integers(1, 6), st.sampled_from([0, 10, 2 * HOUR, 30 * 24 * HOUR]),
                st.booleans())


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, min_size=2, max_size=40), cancel_seed=st.integers(0, 2 ** 32 - 1),
       ratio=st.sampled_from([0.01, 0.3, 0.5, 1.0]),
       # the horizon (later - HOUR past T0) below, between and just past the rows' times:
       # an integer range would draw mostly small values, never moving the horizon
       later=st.sampled_from([0, HOUR // 2, HOUR + 5, HOUR + 10, HOUR + 11, 3 * HOUR,
                              3 * HOUR + 1]),
       seg_bytes=st.sampled_from([400, 1500, 4000]))
def test_model_of_survivors(tmp_path_factory, rows, cancel_seed, ratio, later, seg_bytes):
    cfg = LogConfig(segment_bytes=seg_bytes, index_interval_bytes=64, retention_ms=HOUR)
    path = str(tmp_path_factory.mktemp("h") / "p")
    m = _build(path, rows, cfg)
    rng = np.random.default_rng(cancel_seed)
    cancelled = {o for o in m.rows if rng.random() < 0.2}
    now = T0 + later
    hz = now - HOUR
    removable = {o for o in m.rows if m.removable(o, hz, cancelled)}
    before = {b: (_headers(path, b), os.path.getsize(segment_file(path, b, LOG_SUFFIX)))
              for b in segment_bases(path)[:-1]}  # the sealed segments (the active one is empty)
    compact_offline(path, cfg, now, cancelled=cancelled, min_ratio=ratio)
    after = read_dir(path)
    keep = set(m.rows) - removable
    assert keep <= set(after), "a non-removable record was lost"
    for o, r in after.items():
        assert r == m.rows[o], f"record {o} changed"
    for base, (headers, size) in before.items():
        held = set().union(*map(_offsets, headers))
        gone = held - set(after)
        # a segment is rewritten (everything removable goes) or left as it was
        assert gone in (set(), held & removable), f"segment {base} lost part of {gone}"
        # and it is rewritten once removable records take `ratio` of its bytes (counting
        # a partly removable batch's share; a byte of slack for the planner's rounding)
        share = sum(h.size * len(_offsets(h) & removable) / len(_offsets(h)) for h in headers)
        if held <= removable or share >= ratio * size + 1:
            assert gone == held & removable, \
                f"segment {base}: {share:.0f} of {size} bytes removable, ratio {ratio}, kept"
    got = _fetch_all(path, cfg, T0 + 31 * 24 * HOUR)
    assert [(r.deliver_after, r.offset) for r in got] == sorted((r[4], o) for o, r in after.items())
    # compacting again with nothing new removable changes nothing
    listing = {f: os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)}
    assert compact_offline(path, cfg, now, cancelled=cancelled, min_ratio=ratio) == 0
    assert {f: os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)} == listing
    assert read_dir(path) == after


def test_removable_bytes_agrees_with_batch_plan():
    """The planner's sort-free count equals the rewriter's per-batch plan."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        counts = rng.integers(1, 6, n)
        base = np.concatenate([[0], np.cumsum(counts)[:-1]]) + 100
        pos = np.cumsum(rng.integers(70, 200, n))
        size = rng.integers(70, 400, n)
        da = rng.integers(0, 50, n)
        order = np.lexsort((base, da))
        cols = [da[order].astype(np.int64), base[order].astype(np.int64),
                pos[order].astype(np.int64), (counts[order] - 1).astype(np.int32),
                size[order].astype(np.int32)]
        src = compactor.Source(100, 100 + int(counts.sum()), int(size.sum()), "x", cols)
        gone = sorted(set(rng.integers(100, 100 + counts.sum(), rng.integers(0, 10)).tolist()))
        hz = int(rng.integers(0, 50))
        for hook in (None, lambda a, b, gone=gone: gone):
            fast = compactor.removable_bytes(src, hz, hook)
            assert abs(fast - compactor.batch_plan(src, hz, hook).removable_bytes) <= 1


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 5), st.integers(1, 500)),
                        max_size=10),
       cancel=st.sets(st.integers(0, 60), max_size=30), hz=st.integers(-1, 10))
def test_removable_rule_matches_a_record_model(batches, cancel, hz):
    """Batch by batch, the rule against its record-level statement: a record goes when its
    batch is due before the horizon or it is cancelled; a batch goes when all its records
    do, and counts the share of its bytes that goes."""
    first = np.cumsum([0] + [c for _, c, _ in batches])[:-1].astype(np.int64)
    da, count, size = (np.array([b[i] for b in batches], dtype=np.int64) for i in range(3))
    gone = np.array(sorted(cancel), dtype=np.int64)
    rm = removable.removable(da, first, count, size, hz, gone)
    share = 0.0
    for i, (d, c, s) in enumerate(batches):
        offsets = range(int(first[i]), int(first[i]) + c)
        goes = [d < hz or o in cancel for o in offsets]
        assert bool(rm.drop[i]) == all(goes)
        assert rm.cancelled[i] == sum(o in cancel for o in offsets)
        share += s if all(goes) else s * sum(goes) / c
    assert rm.removable_bytes == pytest.approx(share)
