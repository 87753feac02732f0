"""The group store (kdelay.groups.positions): one position file per consumer group, two
checksummed slots rewritten in place; damage to real files, the first format, the bound on
open descriptors."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kdelay import DeliveryKey, KdelayError
from kdelay.errors import CorruptLogError
from kdelay.groups.open_files import DescriptorPool
from kdelay.groups.position_file import SLOT_SPAN, encode_legacy, encode_slot, parse
from kdelay.groups.positions import GROUPS_DIR, MAX_GROUP_NAME_BYTES, GroupStore
from kdelay.testing.damage import flip_byte


@pytest.fixture
def store(tmp_path) -> GroupStore:
    return GroupStore(os.fspath(tmp_path))


def test_commit_then_read_back_in_a_new_store(store, tmp_path):
    store.commit("a", DeliveryKey(10, 3), clock=100)
    store.commit("b", None, clock=50)
    again = GroupStore(os.fspath(tmp_path))
    assert again.committed("a") == DeliveryKey(10, 3)
    assert again.committed("b") is None
    assert again.committed("never") is None
    assert again.groups() == ["a", "b"]
    assert again.max_clock() == 100


def test_a_later_commit_replaces_the_position_atomically(store, tmp_path):
    store.commit("g", DeliveryKey(1, 1), clock=1)
    store.commit("g", DeliveryKey(2, 5), clock=2)
    d = tmp_path / GROUPS_DIR
    assert sorted(os.listdir(d)) == [store.path("g").rsplit("/", 1)[1]]  # no .tmp left
    assert GroupStore(os.fspath(tmp_path)).committed("g") == DeliveryKey(2, 5)


def test_names_cannot_escape_the_directory(store, tmp_path):
    for name in ("../x", "/abs", "a/b", "..", "\x00", "line\nbreak"):
        store.commit(name, DeliveryKey(1, 2), clock=3)
        assert os.path.dirname(store.path(name)) == os.fspath(tmp_path / GROUPS_DIR)
    assert GroupStore(os.fspath(tmp_path)).committed("line\nbreak") == DeliveryKey(1, 2)


@pytest.mark.parametrize("bad", ["", None, 7, "x" * (MAX_GROUP_NAME_BYTES + 1), "\ud800"])
def test_bad_group_names_are_refused_and_write_nothing(store, tmp_path, bad):
    with pytest.raises(KdelayError):
        store.commit(bad, None, clock=0)
    assert not (tmp_path / GROUPS_DIR).exists()


def two_slot_file(store: GroupStore) -> Path:
    """g at (7, 8) in slot 0 (older) and (9, 10) in slot 1 (newest); "other" at (1, 1)."""
    store.commit("g", DeliveryKey(7, 8), clock=90)
    store.commit("g", DeliveryKey(9, 10), clock=99)
    store.commit("other", DeliveryKey(1, 1), clock=5)
    return Path(store.path("g"))


def flip(p: Path, at: int) -> None:
    flip_byte(p, at, 0x20)


def test_a_commit_rewrites_one_slot_in_place(store, tmp_path):
    p = two_slot_file(store)
    assert p.stat().st_size == SLOT_SPAN + len(encode_slot("g", 2, DeliveryKey(9, 10), 99))
    ino = p.stat().st_ino
    store.commit("g", DeliveryKey(11, 12), clock=100)  # into slot 0, the older
    assert p.stat().st_ino == ino  # no new file
    raw = p.read_bytes()
    assert raw[:SLOT_SPAN].startswith(encode_slot("g", 3, DeliveryKey(11, 12), 100))
    assert raw[SLOT_SPAN:] == encode_slot("g", 2, DeliveryKey(9, 10), 99)


@pytest.mark.parametrize("slot", [0, 1])
def test_a_flipped_byte_in_one_slot_falls_back_to_the_other(store, tmp_path, slot):
    p = two_slot_file(store)
    flip(p, slot * SLOT_SPAN + 30)  # inside the key
    fresh = GroupStore(os.fspath(tmp_path))
    # slot 1 is the newest: damage there is a torn last commit, and the one before stands
    assert fresh.committed("g") == (DeliveryKey(9, 10) if slot == 0 else DeliveryKey(7, 8))
    fresh.commit("g", DeliveryKey(20, 21), clock=120)  # overwrites the damaged slot
    assert GroupStore(os.fspath(tmp_path)).committed("g") == DeliveryKey(20, 21)
    assert parse(p.read_bytes(), "g").damage == ("", "")


@pytest.mark.parametrize("damage", ["both_flipped", "truncated", "empty", "other_name",
                                    "garbage"])
def test_a_file_with_no_valid_slot_is_reported_not_believed(store, tmp_path, damage):
    p = two_slot_file(store)
    if damage == "both_flipped":
        flip(p, 30)
        flip(p, SLOT_SPAN + 30)
    elif damage == "truncated":
        p.write_bytes(p.read_bytes()[:20])
    elif damage == "empty":
        p.write_bytes(b"")
    elif damage == "other_name":
        p.write_bytes(Path(store.path("other")).read_bytes())
    else:
        p.write_bytes(b"\x00\xff garbage" * 100)
    fresh = GroupStore(os.fspath(tmp_path))
    with pytest.raises(CorruptLogError, match="corrupt") as e:
        fresh.committed("g")
    assert e.value.path == os.fspath(p) and os.fspath(p) in str(e.value)
    with pytest.raises(CorruptLogError):
        fresh.committed("g")  # not forgotten: asked again, still refused
    assert fresh.committed("other") == DeliveryKey(1, 1)
    assert fresh.max_clock() == 5  # the damaged file is skipped here
    fresh.commit("g", DeliveryKey(30, 31), clock=130)  # a commit replaces it whole
    assert GroupStore(os.fspath(tmp_path)).committed("g") == DeliveryKey(30, 31)


def test_a_file_cut_inside_the_newest_slot_keeps_the_older(store, tmp_path):
    p = two_slot_file(store)
    p.write_bytes(p.read_bytes()[:SLOT_SPAN + 25])
    assert GroupStore(os.fspath(tmp_path)).committed("g") == DeliveryKey(7, 8)


def test_the_log_clock_is_the_largest_of_both_slots(store, tmp_path):
    two_slot_file(store)
    assert GroupStore(os.fspath(tmp_path)).max_clock() == 99


def test_a_first_format_file_is_read_then_upgraded_at_its_next_commit(store, tmp_path):
    directory = tmp_path / GROUPS_DIR
    directory.mkdir()
    for group, key, clock in [("old", DeliveryKey(4, 5), 77), ("none", None, 3)]:
        (directory / (group.encode().hex() + ".pos")).write_bytes(
            encode_legacy(group, key, clock))
    assert store.committed("old") == DeliveryKey(4, 5)
    assert store.committed("none") is None
    assert store.has_position("none")
    assert store.max_clock() == 77
    store.commit("old", DeliveryKey(6, 7), clock=80)
    raw = Path(store.path("old")).read_bytes()
    assert raw == encode_slot("old", 1, DeliveryKey(6, 7), 80)  # slots from now on
    store.commit("old", DeliveryKey(8, 9), clock=81)
    again = GroupStore(os.fspath(tmp_path))
    assert again.committed("old") == DeliveryKey(8, 9)
    assert again.committed("none") is None
    assert again.max_clock() == 81
    assert sorted(os.listdir(directory)) == sorted(
        g.encode().hex() + ".pos" for g in ("old", "none"))


def test_a_damaged_first_format_file_is_reported(store, tmp_path):
    directory = tmp_path / GROUPS_DIR
    directory.mkdir()
    raw = encode_legacy("g", DeliveryKey(4, 5), 77).replace(b"4 5", b"4 6")
    (directory / (b"g".hex() + ".pos")).write_bytes(raw)
    with pytest.raises(CorruptLogError, match="checksum"):
        store.committed("g")


def test_open_descriptors_stay_within_the_budget(tmp_path):
    pool = DescriptorPool(budget=8)
    store = GroupStore(os.fspath(tmp_path), pool=pool)
    groups = [f"g{i}" for i in range(40)]
    for rnd in range(3):
        for i, g in enumerate(groups):
            store.commit(g, DeliveryKey(rnd, i), clock=rnd)
            assert pool.held(store._owner) <= 8
        store.commit_many({g: DeliveryKey(10 + rnd, i) for i, g in enumerate(groups)},
                          clock=10 + rnd)
        assert pool.held(store._owner) <= 8
    again = GroupStore(os.fspath(tmp_path), pool=pool)
    assert {g: again.committed(g) for g in groups} == {
        g: DeliveryKey(12, i) for i, g in enumerate(groups)}
    store.close()
    assert pool.held(store._owner) == 0


def test_a_hot_group_keeps_its_descriptor_open(tmp_path):
    pool = DescriptorPool(budget=8)
    store = GroupStore(os.fspath(tmp_path), pool=pool)
    store.commit("g", None, clock=1)  # created whole: no descriptor yet
    for i in range(20):
        store.commit("g", DeliveryKey(i, i), clock=2 + i)
    assert pool.opened == 1


def test_foreign_files_in_the_groups_directory_are_ignored(store, tmp_path):
    store.commit("g", None, clock=1)
    (tmp_path / GROUPS_DIR / "zz-not-hex.pos").write_text("x")
    (tmp_path / GROUPS_DIR / "README").write_text("x")
    assert store.groups() == ["g"]


def test_a_store_dropped_without_close_gives_its_descriptors_back(tmp_path):
    """Its finalizer may run inside a garbage collection triggered while the pool's lock is
    held (it once deadlocked there): it takes no lock, and the next use closes them."""
    pool = DescriptorPool(budget=8)
    store = GroupStore(os.fspath(tmp_path), pool=pool)
    for i in range(3):
        store.commit("g", DeliveryKey(i, i), clock=i)
    owner = store._owner
    assert pool.held(owner) == 1
    finalizer = store._finalizer
    done = threading.Event()

    def collect_under_the_lock() -> None:
        with pool._lock:
            finalizer()  # as a collection inside the pool's own code would
        done.set()
    worker = threading.Thread(target=collect_under_the_lock, daemon=True)
    worker.start()
    assert done.wait(60), "the finalizer blocked on the pool's lock"
    other = GroupStore(os.fspath(tmp_path), pool=pool)
    other.commit("h", None, clock=9)
    other.commit("h", None, clock=10)  # a use of the pool: the dropped store's are closed
    assert pool.held(owner) == 0
