"""The read side's caches: ChunkCache (a remote .log's bytes, fetched in chunks at most
once each) and CacheBudget (the LRU bound over remote segments)."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kdelay.errors import CorruptLogError
from kdelay.log.tiered.cache_budget import CacheBudget
from kdelay.log.tiered.chunk_cache import ChunkCache, chunks_needed, runs_of


class _Store:
    """A remote object in memory that counts what is fetched of it."""

    def __init__(self, data: bytes):
        self.data = data
        self.calls: list[list[tuple[int, int]]] = []
        self.fetched = np.zeros(len(data), np.int64)

    def fetch(self, starts, ends):
        self.calls.append(list(zip(starts, ends, strict=True)))
        for s, e in zip(starts, ends, strict=True):
            self.fetched[s:e] += 1
        return [self.data[s:e] for s, e in zip(starts, ends, strict=True)]


@given(st.integers(1, 40), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60)),
                                    max_size=12))
def test_chunks_needed_marks_exactly_the_chunks_ranges_touch(chunk, ranges):
    count = 500 // chunk + 1
    starts = np.array([s for s, _ in ranges], np.int64)
    ends = np.array([s + n for s, n in ranges], np.int64)
    expected = np.zeros(count, bool)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        for c in [] if e <= s else range(s // chunk, -(-e // chunk)):
            expected[c] = True
    assert chunks_needed(starts, ends, chunk, count).tolist() == expected.tolist()


@given(st.lists(st.booleans(), max_size=40))
def test_runs_of_are_the_maximal_true_runs(mask):
    first, end = runs_of(np.array(mask, bool))
    rebuilt = np.zeros(len(mask), bool)
    for f, e in zip(first.tolist(), end.tolist(), strict=True):
        assert rebuilt[f:e].sum() == 0
        rebuilt[f:e] = True
        assert e == len(mask) or not mask[e]
        assert f == 0 or not mask[f - 1]
    assert rebuilt.tolist() == list(mask)


@given(st.binary(min_size=1, max_size=3000), st.integers(1, 700),
       st.lists(st.lists(st.tuples(st.integers(0, 2999), st.integers(0, 300)), max_size=6),
                max_size=6))
def test_chunk_cache_reads_the_object_fetching_each_byte_at_most_once(tmp_path_factory, data,
                                                                     chunk, windows):
    store = _Store(data)
    cache = ChunkCache(os.fspath(tmp_path_factory.mktemp("c")), len(data), store.fetch,
                       "mem://x.log", chunk=chunk)
    for window in windows:
        ranges = [(min(s, len(data)), min(s + n, len(data))) for s, n in window]
        cache.ensure(np.array([s for s, _ in ranges], np.int64),
                     np.array([e for _, e in ranges], np.int64))
        assert len(store.calls) <= 1 or store.calls[-1]  # one call per window at most
        for s, e in ranges:
            assert cache.read(s, e - s) == data[s:e]
    assert store.fetched.max(initial=0) <= 1
    assert cache.cached_bytes == int(store.fetched.sum())


def test_chunk_cache_refuses_a_short_object_and_reads_past_its_end(tmp_path):
    store = _Store(b"x" * 100)
    cache = ChunkCache(os.fspath(tmp_path), 200, store.fetch, "mem://p/x.log", chunk=64)
    for start, end in ((90, 150), (10, 201)):
        try:
            cache.ensure(np.array([start]), np.array([end]))
        except CorruptLogError as e:
            assert "mem://p/x.log" in str(e)
        else:
            raise AssertionError("no error")


def test_chunk_cache_drop_forgets_and_fetches_again(tmp_path):
    store = _Store(bytes(range(256)) * 4)
    cache = ChunkCache(os.fspath(tmp_path), 1024, store.fetch, "x", chunk=128)
    assert cache.read(100, 50) == store.data[100:150]
    cache.drop()
    assert cache.cached_bytes == 0
    assert cache.read(100, 50) == store.data[100:150]
    assert store.fetched[100:150].tolist() == [2] * 50
    assert os.listdir(tmp_path) == []  # the cache file is never left in the directory


class _Holder:
    def __init__(self, budget: CacheBudget):
        self.budget, self.evicted = budget, 0

    def evict(self):
        self.evicted += 1
        self.budget.release(self)


@given(st.integers(0, 1000), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 400)),
                                      max_size=30))
def test_cache_budget_evicts_least_recently_used_others_past_its_bound(limit, charges):
    budget = CacheBudget(limit)
    holders = [_Holder(budget) for _ in range(5)]
    held: dict[int, int] = {}  # the model: holder -> bytes, least recently used first
    for who, n in charges:
        held[who] = held.pop(who, 0) + n
        expected_evicted = []
        excess = sum(held.values()) - limit
        for h, size in list(held.items()):
            if excess <= 0:
                break
            if h != who and size:
                expected_evicted.append(h)
                excess -= size
        before = [holder.evicted for holder in holders]
        budget.charge(holders[who], n)
        evicted = [h for h in range(5) if holders[h].evicted > before[h]]
        assert evicted == sorted(expected_evicted)
        for h in evicted:
            del held[h]
        assert budget.held == sum(held.values())
