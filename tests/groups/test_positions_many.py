"""GroupStore.commit_many (the broker's group commit): a crash at every file operation, in
every crash mode, leaves each group at its old or its new position, never a torn or lost
one; once commit_many has returned, every new position survives even a power loss."""

from __future__ import annotations

import contextlib
import os

import pytest

from kdelay import DeliveryKey
from kdelay.groups.parallel_sync import PER_WRITER
from kdelay.groups.positions import GroupStore
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash

OLD = {"a": DeliveryKey(1, 1), "b": DeliveryKey(2, 2), "c": None}
NEW = {"a": DeliveryKey(5, 5), "b": DeliveryKey(6, 6), "c": DeliveryKey(7, 7),
       "d": DeliveryKey(8, 8)}  # d has no position before


def prepare(path: str) -> None:
    store = GroupStore(path)
    for group, key in OLD.items():
        store.commit(group, key, clock=1)


def count_ops(tmp_path) -> int:
    path = os.fspath(tmp_path / "count")
    prepare(path)
    with FaultInjector([path]) as inj:
        GroupStore(path).commit_many(NEW, clock=10)
    return len(inj.ops)


def test_commit_many_writes_every_position(tmp_path):
    path = os.fspath(tmp_path)
    prepare(path)
    GroupStore(path).commit_many(NEW, clock=10)
    again = GroupStore(path)
    assert {g: again.committed(g) for g in NEW} == NEW
    assert again.max_clock() == 10


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_anywhere_leaves_old_or_new_positions(tmp_path, mode):
    ops = count_ops(tmp_path)
    assert ops >= 2 * len(NEW) + 1  # a file fsync per group and a directory fsync
    for crash_at in range(ops + 1):
        path = os.fspath(tmp_path / f"{mode}-{crash_at}")
        prepare(path)
        finished = False
        with FaultInjector([path], crash_at=crash_at, seed=crash_at) as inj:
            try:
                GroupStore(path).commit_many(NEW, clock=10)
                finished = True
            except SimulatedCrash:
                pass
        inj.apply_crash(mode)
        again = GroupStore(path)
        for group, key in NEW.items():
            got = again.committed(group)
            assert got == key if finished else got in (OLD.get(group), key), \
                (crash_at, group, got)


# a batch big enough to be spread over several threads (kdelay/groups/parallel_sync.py)
WIDE = [f"w{i}" for i in range(4 * PER_WRITER)]


def wide_round(store: GroupStore, r: int) -> dict:
    batch = {g: DeliveryKey(r, i) for i, g in enumerate(WIDE)}
    store.commit_many(batch, clock=r)
    return batch


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_in_a_batch_spread_over_threads_leaves_old_or_new(tmp_path, mode):
    """Two in-place rounds (each slot overwritten once) of a batch written by several
    threads at once: whichever operation the crash stops, in whatever order the threads
    reached it, every group holds its acknowledged round or the one in flight."""
    count = os.fspath(tmp_path / "count")
    wide_round(GroupStore(count), 1)
    with FaultInjector([count]) as inj:
        store = GroupStore(count)
        wide_round(store, 2)
        wide_round(store, 3)
        store.close()
    ops = len(inj.ops)
    assert ops == 2 * 2 * len(WIDE)  # a pwrite and an fdatasync per group and round
    for crash_at in range(0, ops + 1, 5):
        path = os.fspath(tmp_path / f"{mode}-{crash_at}")
        acked = wide_round(GroupStore(path), 1)
        flying: dict = {}
        store = GroupStore(path)
        with FaultInjector([path], crash_at=crash_at, seed=crash_at) as inj, \
                contextlib.suppress(SimulatedCrash):
            for r in (2, 3):
                flying = {g: DeliveryKey(r, i) for i, g in enumerate(WIDE)}
                acked = wide_round(store, r)
                flying = {}
        store.close()
        inj.apply_crash(mode)
        again = GroupStore(path)
        for g in WIDE:
            assert again.committed(g) in (acked[g], flying.get(g, acked[g])), (crash_at, g)
