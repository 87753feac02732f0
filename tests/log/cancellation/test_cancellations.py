"""The cancellation files on their own: journal format, replay rules, the cache, the store."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay.index.index_file import IndexMeta
from kdelay.log.cancellation import journal as cz
from kdelay.log.cancellation.cancel_store import CancelStore, present_offsets
from kdelay.log.cancellation.per_batch import cancelled_per_batch
from kdelay.log.cancellation.segment_cancels import SegmentCancels


def _entries(*items) -> list[cz.JournalEntry]:
    return [cz.JournalEntry(32 * (i + 1), *it) for i, it in enumerate(items)]


def test_entry_round_trip_and_damage_positions():
    data = cz.journal_header(100, 3) + cz.encode_entry(cz.CANCEL, 105) + \
        cz.encode_entry(cz.MOVE, 107, 130, 0xDEADBEEF) + cz.encode_entry(cz.CONFIRM, 107)
    scan = cz.parse_journal(data, 100)
    assert scan.generation == 3 and not scan.problems
    assert [(e.position, e.kind, e.offset, e.copy_offset, e.copy_crc) for e in scan.entries] == \
        [(32, cz.CANCEL, 105, -1, 0), (64, cz.MOVE, 107, 130, 0xDEADBEEF),
         (96, cz.CONFIRM, 107, -1, 0)]
    bad = bytearray(data)
    bad[70] ^= 0x10  # inside the MOVE
    scan = cz.parse_journal(bytes(bad) + b"\x01\x02", 100)
    assert [p for p, _ in scan.problems] == [64, 128]  # the damaged entry, the torn tail
    assert [e.offset for e in scan.entries] == [105, 107]  # resynced at the next slot
    assert cz.parse_journal(data, 99).generation is None  # header names another segment
    assert cz.parse_journal(b"junk", 100).problems[0][0] == 0


def test_replay_rules():
    ok = _entries((cz.CANCEL, 5, -1, 0), (cz.MOVE, 6, 20, 1), (cz.CONFIRM, 6, -1, 0))
    assert cz.replay(ok, 10, 0, lambda c, k: False) == ({5, 6}, False)
    unsettled = _entries((cz.MOVE, 6, 20, 1))
    assert cz.replay(unsettled, 10, 0, lambda c, k: False) == (set(), True)
    assert cz.replay(unsettled, 10, 0, lambda c, k: True) == ({6}, True)
    assert cz.replay(unsettled, 10, 0, lambda c, k: None) == ({6}, True)
    assert cz.replay(unsettled, 10, 0, None) == ({6}, False)
    # an offset at or past the recovered end: its record was lost, the entry is dropped
    assert cz.replay(_entries((cz.CANCEL, 12, -1, 0)), 10, 0, None) == (set(), True)
    voided = _entries((cz.MOVE, 6, 20, 1), (cz.VOID, 6, -1, 0), (cz.CANCEL, 6, -1, 0))
    assert cz.replay(voided, 10, 0, lambda c, k: False) == ({6}, False)


def test_segment_cache_trusted_lazily_and_rebuilt_when_bad(tmp_path):
    d = os.fspath(tmp_path)
    sc = SegmentCancels(d, 0)
    sc.write([cz.encode_entry(cz.CANCEL, o) for o in (3, 9, 4)])
    sc.add((3, 9, 4))
    assert sc.in_range(0, 100) == [3, 4, 9] and sc.count_in_range(4, 9) == 2
    sc.persist()
    sc.write([cz.encode_entry(cz.CANCEL, 7)])
    sc.add((7,))
    assert sc.in_range(4, 8) == [4, 7] and 7 in sc and 5 not in sc
    sc.persist()
    sc.close()
    problems: list[str] = []
    again = SegmentCancels.open(d, 0, 50, check_range=False, copy_check=None,
                                   problems=problems)
    assert again._disk is None and len(again) == 4  # header only: nothing mapped yet
    assert again.offsets().tolist() == [3, 4, 7, 9] and not problems
    again.close()
    # damage the cache's data: the header still matches, the data CRC does not
    with open(sc.index_path, "r+b") as f:
        f.seek(64 + 8)
        f.write(b"\xff")
    third = SegmentCancels.open(d, 0, 50, check_range=False, copy_check=None,
                                   problems=problems)
    assert third.offsets().tolist() == [3, 4, 7, 9] and not third.cache_current
    third.close()
    # a stale cache (journal grew after it) is replayed at open
    with open(sc.journal_path, "ab") as f:
        f.write(cz.encode_entry(cz.CANCEL, 11))
    fourth = SegmentCancels.open(d, 0, 50, check_range=False, copy_check=None,
                                    problems=problems)
    assert fourth.offsets().tolist() == [3, 4, 7, 9, 11] and fourth.cache_current
    fourth.close()


@pytest.mark.parametrize("damaged", [False, True])
def test_cancels_added_before_the_cache_is_first_mapped_count_once(tmp_path, damaged):
    """Regression (found by the delivery model): a cache trusted at open is mapped only on
    the first query. Cancels written before that grew the journal past what the cache
    covers; the map then took the cache for stale, replayed the whole journal, new entries
    included, and counted those offsets twice (in the replay and among the recent ones)."""
    d = os.fspath(tmp_path)
    sc = SegmentCancels(d, 0)
    sc.write([cz.encode_entry(cz.CANCEL, o) for o in (3, 9)])
    sc.add((3, 9))
    sc.persist()
    sc.close()
    if damaged:  # the header matches, the data does not: the journal is replayed instead
        with open(sc.index_path, "r+b") as f:
            f.seek(64)
            f.write(b"\xff")
    again = SegmentCancels.open(d, 0, 50, check_range=False, copy_check=None, problems=[])
    assert again._disk is None  # trusted by its header, not mapped yet
    again.write([cz.encode_entry(cz.CANCEL, 5)])
    again.add((5,))
    assert again.in_range(0, 100) == [3, 5, 9]
    assert again.count_in_range(0, 100) == 3 and len(again) == 3
    assert again.offsets().tolist() == [3, 5, 9]
    assert again.cache_current is False  # the journal grew: the next checkpoint rewrites it
    again.persist()
    assert again.offsets().tolist() == [3, 5, 9] and again.recent_count == 0
    again.close()


def test_recovery_drops_lost_targets_and_voids_uncopied_moves(tmp_path):
    d = os.fspath(tmp_path)
    store = CancelStore(d)
    store.cancel({0: [2, 8]})
    store.begin_move(0, 3, copy_offset=9, copy_crc=77)
    store.end_move(0, 3)
    store.begin_move(0, 4, copy_offset=10, copy_crc=78)
    store.end_move(0, 4)
    store.sync()
    store.close()
    # crash: offsets 8.. were lost, the copy at 9 is gone, the copy at 10 is "there"
    seen = []

    def copy_check(c, k):
        seen.append((c, k))
        return c == 10 and k == 78

    again = CancelStore.open(d, [(0, 8)], recovered=[0], copy_check=copy_check)
    assert sorted(seen) == [(9, 77), (10, 78)]
    assert again.get(0).offsets().tolist() == [2, 4]
    again.close()
    scan = cz.read_journal(os.path.join(d, f"{0:020d}.cancels"), 0)
    assert scan.generation == 1  # rewritten: no MOVE left to re-decide
    assert [(e.kind, e.offset) for e in scan.entries] == [(cz.CANCEL, 2), (cz.CANCEL, 4)]
    # a clean reopen trusts the rewritten cache
    third = CancelStore.open(d, [(0, 20)])
    assert third.get(0)._disk is None and third.total() == 2
    third.close()


def test_confirmed_moves_are_not_rechecked(tmp_path):
    d = os.fspath(tmp_path)
    store = CancelStore(d)
    store.begin_move(0, 1, copy_offset=5, copy_crc=1)
    store.end_move(0, 1)
    store.log_synced()
    store.sync()
    store.close()
    again = CancelStore.open(d, [(0, 6)], recovered=[0],
                             copy_check=lambda c, k: pytest.fail("rechecked"))
    assert again.is_cancelled(0, 1)
    again.close()


def test_checkpoint_threshold_bounds_recent_memory(tmp_path):
    store = CancelStore(os.fspath(tmp_path))
    for i in range(3000):
        store.cancel({0: [i]})
        if store.needs_checkpoint():
            store.checkpoint(everything=False)
        assert store.recent_total() <= 1025
    assert store.total() == 3000
    store.checkpoint(everything=True)
    assert store.recent_total() == 0
    store.drop(0)
    assert not os.listdir(tmp_path)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 12))
def test_fuzzed_journal_never_raises_and_names_positions(tmp_path_factory, seed, n):
    rng = random.Random(seed)
    data = bytearray(cz.journal_header(0, 0) + b"".join(
        cz.encode_entry(rng.choice([1, 2, 3, 4]), rng.randrange(40), rng.randrange(40), 5)
        for _ in range(n)))
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.4 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op < 0.7:
            del data[rng.randrange(len(data) + 1):]
        else:
            data += bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40)))
    d = os.fspath(tmp_path_factory.mktemp("fz"))
    with open(os.path.join(d, f"{0:020d}.cancels"), "wb") as f:
        f.write(data)
    problems: list[str] = []
    sc = SegmentCancels.open(d, 0, 30, check_range=True, copy_check=lambda c, k: None,
                                problems=problems)
    offs = sc.offsets()
    assert np.all((offs >= 0) & (offs < 30))
    sc.close()
    for p in problems:
        assert ".cancels at byte " in p
    # after the rewrite the files are consistent: a clean reopen reports nothing
    problems2: list[str] = []
    sc2 = SegmentCancels.open(d, 0, 30, check_range=False, copy_check=None,
                                 problems=problems2)
    assert sc2.offsets().tolist() == offs.tolist() and not problems2
    sc2.close()


def test_read_cancelled_for_offline_readers(tmp_path):
    d = os.fspath(tmp_path)
    assert len(cz.read_cancelled(d, 0)) == 0
    store = CancelStore(d)
    store.cancel({0: [4, 2, 9]})
    store.sync()
    assert cz.read_cancelled(d, 0).tolist() == [2, 4, 9]  # from the journal (no cache yet)
    store.checkpoint(everything=True)
    assert cz.read_cancelled(d, 0).tolist() == [2, 4, 9]  # from the cache
    assert cz.read_cancelled(d, 0, next_offset=5).tolist() == [2, 4]
    errors, n = cz.check_cancels(d, 0, 5)
    assert n == 2 and [e[1] for e in errors] == [96]  # offset 9: outside the segment
    with open(os.path.join(d, f"{0:020d}.cancelindex"), "r+b") as f:
        f.seek(70)
        f.write(b"\x07")
    errors, _ = cz.check_cancels(d, 0, 10)
    assert [(os.path.basename(p), pos) for p, pos, _ in errors] == \
        [(f"{0:020d}.cancelindex", 0)]
    store.close()


@settings(max_examples=100, deadline=None)
@given(disk=st.sets(st.integers(0, 60), max_size=40), recent=st.sets(st.integers(0, 60)),
       lo=st.integers(0, 60), width=st.integers(0, 20))
def test_range_queries_match_brute_force(tmp_path_factory, disk, recent, lo, width):
    sc = SegmentCancels(os.fspath(tmp_path_factory.mktemp("rq")), 0)
    sc._disk = np.array(sorted(disk), dtype=np.int64)
    sc._disk_count = len(disk)
    sc.add(recent - disk)
    hi = lo + width
    want = sorted(o for o in disk | recent if lo <= o <= hi)
    assert sc.in_range(lo, hi) == want
    assert sc.count_in_range(lo, hi) == len(want)


def _lay_out(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for gap, count in spans:
        out.append((at + gap, count))
        at += gap + count
    return out


# batches as (first offset, record count), laid end to end with gaps, in any order
BATCHES = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 6)), max_size=12).flatmap(
    lambda spans: st.permutations(_lay_out(spans)))


@settings(max_examples=200, deadline=None)
@given(batches=BATCHES, cancelled=st.sets(st.integers(0, 80), max_size=30))
def test_cancelled_per_batch_matches_a_model(batches, cancelled):
    gone = np.array(sorted(cancelled), dtype=np.int64)
    first = np.array([f for f, _ in batches], dtype=np.int64)
    count = np.array([c for _, c in batches], dtype=np.int64)
    start, n = cancelled_per_batch(gone, first, count)
    for i, (f, c) in enumerate(batches):
        mine = sorted(o for o in cancelled if f <= o < f + c)
        assert gone[start[i]:start[i] + n[i]].tolist() == mine
        one = cancelled_per_batch(gone, f, c)  # a single batch: the same answer
        assert (int(one.start), int(one.cancelled)) == (start[i], n[i])


@settings(max_examples=200, deadline=None)
@given(batches=BATCHES, cancelled=st.sets(st.integers(0, 80), max_size=30))
def test_present_offsets_matches_a_model(batches, cancelled):
    gone = np.array(sorted(cancelled), dtype=np.int64)
    first = np.array([f for f, _ in batches], dtype=np.int64)
    lod = np.array([c - 1 for _, c in batches], dtype=np.int32)
    held = {o for f, c in batches for o in range(f, f + c)}
    assert present_offsets(gone, first, lod).tolist() == sorted(cancelled & held)


@pytest.mark.parametrize("damage", ["bad magic", "header checksum mismatch"])
def test_damaged_journal_header_is_refused_on_every_path(tmp_path, damage):
    """A journal rewritten to generation 1 beside a stale generation-0 cache covering as
    many bytes: damage to the header's generation field makes it read 0, so a reader that
    trusts the field serves the stale cache. Every reader must refuse the header."""
    d = os.fspath(tmp_path)
    sc = SegmentCancels(d, 0)
    sc.write([cz.encode_entry(cz.CANCEL, o) for o in (1, 2, 3)])
    sc.add((1, 2, 3))
    sc.persist()
    cache = os.path.join(d, f"{0:020d}.cancelindex")
    with open(cache, "rb") as f:
        stale = f.read()
    sc.rewrite({4, 5, 6})  # generation 1, the same journal size
    sc.close()
    with open(cache, "wb") as f:
        f.write(stale)
    journal = os.path.join(d, f"{0:020d}.cancels")
    assert cz.read_cancelled(d, 0).tolist() == [4, 5, 6]  # sound header: stale cache ignored
    with open(journal, "r+b") as f:
        f.seek(16)  # generation 1 -> 0
        f.write(b"\x00")
        if damage == "bad magic":
            f.seek(0)
            f.write(b"X")
    assert cz.read_cancelled(d, 0).tolist() == [4, 5, 6]
    scan = cz.read_journal(journal, 0)
    assert scan.generation is None and scan.problems[0][0] == 0
    assert scan.problems[0][1].startswith(damage)
    problems: list[str] = []
    sc = SegmentCancels.open(d, 0, 10, check_range=False, copy_check=None, problems=problems)
    assert sc.offsets().tolist() == [4, 5, 6]
    assert any(damage in p for p in problems)
    sc.close()


def test_cache_is_current_only_for_its_journal():
    meta = IndexMeta(base_offset=100, log_bytes=96, next_offset=2, entries=3)
    assert cz.cache_is_current(meta, 100, 96, 2)
    for other in ((101, 96, 2), (100, 128, 2), (100, 96, 3), (100, 96, None)):
        assert not cz.cache_is_current(meta, *other)


def test_cancelled_in_journal_decides_nothing(tmp_path):
    path = os.path.join(tmp_path, f"{100:020d}.cancels")
    with open(path, "wb") as f:  # an unconfirmed move, a voided cancel, an offset far out
        f.write(cz.journal_header(100, 0) + cz.encode_entry(cz.MOVE, 101, 500, 7) +
                cz.encode_entry(cz.CANCEL, 102) + cz.encode_entry(cz.VOID, 102) +
                cz.encode_entry(cz.CANCEL, 1 << 40))
    assert cz.cancelled_in_journal(path, 100) == {101, 1 << 40}
