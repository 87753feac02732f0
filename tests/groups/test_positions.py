"""The group store (kdelay.groups.positions): one commit journal per log for all its groups;
a commit or a group commit is one append and one fdatasync, the journal is rewritten
(swapped) when it outgrows its live positions, deletes, names, and per-group files of the
earlier versions (both formats) read and folded in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdelay import DeliveryKey, KdelayError
from kdelay.errors import CorruptLogError
from kdelay.groups.journal_format import HEADER_SIZE, RECORD_OVERHEAD, scan
from kdelay.groups.legacy_positions import legacy_path
from kdelay.groups.position_file import SLOT_SPAN, encode_legacy, encode_slot
from kdelay.groups.positions import (
    COMPACT_RATIO,
    GROUPS_DIR,
    JOURNAL_FILE,
    MAX_GROUP_NAME_BYTES,
    GroupStore,
)
from kdelay.testing.damage import flip_byte
from kdelay.testing.faults import FaultInjector


@pytest.fixture
def store(tmp_path) -> GroupStore:
    return GroupStore(os.fspath(tmp_path))


def journal(tmp_path) -> Path:
    return tmp_path / GROUPS_DIR / JOURNAL_FILE


def test_commit_then_read_back_in_a_new_store(store, tmp_path):
    store.commit("a", DeliveryKey(10, 3), clock=100)
    store.commit("b", None, clock=50)
    again = GroupStore(os.fspath(tmp_path))
    assert again.committed("a") == DeliveryKey(10, 3)
    assert again.committed("b") is None and again.has_position("b")
    assert again.committed("never") is None and not again.has_position("never")
    assert again.groups() == ["a", "b"]
    assert again.max_clock() == 100


def test_a_commit_is_one_append_and_one_fdatasync(store, tmp_path):
    store.commit("g", DeliveryKey(1, 1), clock=1)  # makes the journal
    p = journal(tmp_path)
    size, ino = p.stat().st_size, p.stat().st_ino
    with FaultInjector([os.fspath(tmp_path)]) as inj:
        store.commit("g", DeliveryKey(2, 5), clock=2)
        store.commit_many({f"m{i}": DeliveryKey(3, i) for i in range(50)}, clock=3)
    assert [op for op, _ in inj.ops] == ["write", "fdatasync"] * 2
    assert p.stat().st_ino == ino  # no new file
    assert p.stat().st_size == size + (RECORD_OVERHEAD + 1) + 50 * RECORD_OVERHEAD + sum(
        len(f"m{i}") for i in range(50))
    again = GroupStore(os.fspath(tmp_path))
    assert again.committed("g") == DeliveryKey(2, 5)
    assert {again.committed(f"m{i}") for i in range(50)} == {DeliveryKey(3, i)
                                                             for i in range(50)}
    assert os.listdir(tmp_path / GROUPS_DIR) == [JOURNAL_FILE]


def test_names_are_kept_whole_and_make_no_files(store, tmp_path):
    names = ["../x", "/abs", "a/b", "..", "\x00", "line\nbreak", "é" * 60]
    for name in names:
        store.commit(name, DeliveryKey(1, 2), clock=3)
    assert os.listdir(tmp_path / GROUPS_DIR) == [JOURNAL_FILE]
    again = GroupStore(os.fspath(tmp_path))
    assert again.groups() == sorted(names)
    assert all(again.committed(n) == DeliveryKey(1, 2) for n in names)


@pytest.mark.parametrize("bad", ["", None, 7, "x" * (MAX_GROUP_NAME_BYTES + 1), "\ud800"])
def test_bad_group_names_are_refused_and_write_nothing(store, tmp_path, bad):
    with pytest.raises(KdelayError):
        store.commit(bad, None, clock=0)
    with pytest.raises(KdelayError):
        store.commit_many({"ok": None, bad: None}, clock=0)
    assert not (tmp_path / GROUPS_DIR).exists()


def test_the_journal_is_rewritten_when_it_outgrows_its_live_positions(tmp_path):
    path = os.fspath(tmp_path)
    store = GroupStore(path, compact_min_bytes=0)
    live = HEADER_SIZE + sum(RECORD_OVERHEAD + len(g) for g in ("g0", "g1", "g2"))
    swaps, before = 0, 0
    for i in range(200):
        store.commit(f"g{i % 3}", DeliveryKey(i, i), clock=i)
        size = journal(tmp_path).stat().st_size
        assert size <= COMPACT_RATIO * live, (i, size)
        swaps += size < before
        before = size
    assert swaps > 10  # swapped in again and again
    again = GroupStore(path)
    assert {g: again.committed(g) for g in ("g0", "g1", "g2")} == {
        "g0": DeliveryKey(198, 198), "g1": DeliveryKey(199, 199), "g2": DeliveryKey(197, 197)}
    assert os.listdir(tmp_path / GROUPS_DIR) == [JOURNAL_FILE]


def test_a_deleted_group_is_gone_and_its_clock_still_counts(tmp_path):
    path = os.fspath(tmp_path)
    store = GroupStore(path, compact_min_bytes=0)
    store.commit("keep", DeliveryKey(1, 1), clock=10)
    store.commit("drop", DeliveryKey(2, 2), clock=500)
    assert store.delete("drop", clock=20) and not store.delete("drop", clock=21)
    assert not store.has_position("drop") and store.committed("drop") is None
    assert store.groups() == ["keep"]
    for i in range(30):  # rewrites that leave the deleted group's records behind
        store.commit("keep", DeliveryKey(3, i), clock=30 + i)
    again = GroupStore(path)
    assert again.groups() == ["keep"] and not again.has_position("drop")
    assert again.max_clock() == 500  # the header's clock floor keeps it
    assert b"drop" not in journal(tmp_path).read_bytes()


def test_foreign_files_in_the_groups_directory_are_ignored(store, tmp_path):
    store.commit("g", None, clock=1)
    (tmp_path / GROUPS_DIR / "zz-not-hex.pos").write_text("x")
    (tmp_path / GROUPS_DIR / "README").write_text("x")
    again = GroupStore(os.fspath(tmp_path))
    assert again.groups() == ["g"]
    again.commit("g", DeliveryKey(1, 1), clock=2)
    assert (tmp_path / GROUPS_DIR / "README").exists()


# ------------------------------------------------------------------ files of earlier versions

def old_files(tmp_path) -> Path:
    """g: two slots (newer in slot 1); old: the first format; none: first format, None."""
    d = tmp_path / GROUPS_DIR
    d.mkdir()
    older = encode_slot("g", 1, DeliveryKey(7, 8), 90)
    (d / (b"g".hex() + ".pos")).write_bytes(
        older + bytes(SLOT_SPAN - len(older)) + encode_slot("g", 2, DeliveryKey(9, 10), 99))
    (d / (b"old".hex() + ".pos")).write_bytes(encode_legacy("old", DeliveryKey(4, 5), 77))
    (d / (b"none".hex() + ".pos")).write_bytes(encode_legacy("none", None, 3))
    return d


def test_old_files_of_both_formats_are_read_then_folded_in_at_the_first_commit(tmp_path):
    d = old_files(tmp_path)
    store = GroupStore(os.fspath(tmp_path))
    assert store.committed("g") == DeliveryKey(9, 10)
    assert store.committed("old") == DeliveryKey(4, 5)
    assert store.committed("none") is None and store.has_position("none")
    assert store.max_clock() == 99
    assert sorted(os.listdir(d)) == sorted(g.encode().hex() + ".pos"
                                           for g in ("g", "old", "none"))  # reads only
    store.commit("new", DeliveryKey(1, 1), clock=100)
    assert os.listdir(d) == [JOURNAL_FILE]
    again = GroupStore(os.fspath(tmp_path))
    assert {g: again.committed(g) for g in ("g", "old", "none", "new")} == {
        "g": DeliveryKey(9, 10), "old": DeliveryKey(4, 5), "none": None,
        "new": DeliveryKey(1, 1)}
    assert again.max_clock() == 100


@pytest.mark.parametrize("damage", ["both_flipped", "truncated", "empty", "other_name",
                                    "garbage", "first_format_checksum"])
def test_an_old_file_with_no_valid_record_is_reported_not_believed(tmp_path, damage):
    d = old_files(tmp_path)
    p = d / (b"g".hex() + ".pos")
    if damage == "both_flipped":
        flip_byte(p, 30, 0x20)
        flip_byte(p, SLOT_SPAN + 30, 0x20)
    elif damage == "truncated":
        p.write_bytes(p.read_bytes()[:20])
    elif damage == "empty":
        p.write_bytes(b"")
    elif damage == "other_name":
        p.write_bytes((d / (b"old".hex() + ".pos")).read_bytes())
    elif damage == "garbage":
        p.write_bytes(b"\x00\xff garbage" * 100)
    else:
        p.write_bytes(encode_legacy("g", DeliveryKey(4, 5), 77).replace(b"4 5", b"4 6"))
    store = GroupStore(os.fspath(tmp_path))
    with pytest.raises(CorruptLogError) as e:
        store.committed("g")
    assert e.value.path == os.fspath(p) and os.fspath(p) in str(e.value)
    assert store.has_position("g") and "g" in store.groups()
    assert store.committed("old") == DeliveryKey(4, 5)
    store.commit("other", None, clock=1)  # folds the readable ones, leaves this one
    assert sorted(os.listdir(d)) == sorted([JOURNAL_FILE, p.name])
    with pytest.raises(CorruptLogError):
        GroupStore(os.fspath(tmp_path)).committed("g")  # still refused after a reopen
    store.commit("g", DeliveryKey(30, 31), clock=130)  # a commit supersedes it
    assert os.listdir(d) == [JOURNAL_FILE]
    assert GroupStore(os.fspath(tmp_path)).committed("g") == DeliveryKey(30, 31)


def test_a_broken_old_file_goes_with_its_deleted_group(tmp_path):
    d = old_files(tmp_path)
    (d / (b"g".hex() + ".pos")).write_bytes(b"")
    store = GroupStore(os.fspath(tmp_path))
    assert store.delete("g", clock=5)
    assert os.listdir(d) == [JOURNAL_FILE]
    assert not GroupStore(os.fspath(tmp_path)).has_position("g")


def test_an_old_file_the_journal_already_holds_is_a_leftover(tmp_path):
    """A crash between the fold and the removal leaves both: the journal wins, even once a
    later commit moved the group on."""
    d = old_files(tmp_path)
    raw = (d / (b"g".hex() + ".pos")).read_bytes()
    store = GroupStore(os.fspath(tmp_path))
    store.commit("g", DeliveryKey(50, 50), clock=200)
    store.delete("old", clock=201)
    (d / (b"g".hex() + ".pos")).write_bytes(raw)
    (d / (b"old".hex() + ".pos")).write_bytes(encode_legacy("old", DeliveryKey(4, 5), 77))
    again = GroupStore(os.fspath(tmp_path))
    assert again.committed("g") == DeliveryKey(50, 50) and not again.has_position("old")
    again.commit("x", None, clock=202)
    assert os.listdir(d) == [JOURNAL_FILE]
    assert legacy_path(os.fspath(d), "g") == os.fspath(d / (b"g".hex() + ".pos"))


def test_a_journal_scan_of_a_clean_journal_finds_every_record(store, tmp_path):
    store.commit("a", DeliveryKey(1, 1), clock=1)
    store.commit_many({"b": None, "a": DeliveryKey(2, 2)}, clock=2)
    found = scan(journal(tmp_path).read_bytes(), "j")
    assert found.damage is None and found.torn is None
    assert [(r.group, r.key, r.clock) for r in found.records] == [
        ("a", DeliveryKey(1, 1), 1), ("b", None, 2), ("a", DeliveryKey(2, 2), 2)]
