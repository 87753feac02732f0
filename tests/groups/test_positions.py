"""The group store (kdelay.groups.positions): one position file per consumer group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdelay import DeliveryKey, KdelayError
from kdelay.groups.positions import GROUPS_DIR, MAX_GROUP_NAME_BYTES, GroupStore


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


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other_name"])
def test_a_damaged_position_file_is_reported_not_believed(store, tmp_path, damage):
    store.commit("g", DeliveryKey(7, 8), clock=99)
    store.commit("other", DeliveryKey(1, 1), clock=5)
    p = Path(store.path("g"))
    raw = p.read_bytes()
    if damage == "flip":
        p.write_bytes(raw.replace(b"7 8", b"7 9"))
    elif damage == "truncate":
        p.write_bytes(raw[:-5])
    elif damage == "empty":
        p.write_bytes(b"")
    else:
        p.write_bytes(Path(store.path("other")).read_bytes())
    fresh = GroupStore(os.fspath(tmp_path))
    with pytest.raises(KdelayError, match="corrupt"):
        fresh.committed("g")
    assert fresh.committed("other") == DeliveryKey(1, 1)
    assert fresh.max_clock() == 5  # the damaged file is skipped here


def test_foreign_files_in_the_groups_directory_are_ignored(store, tmp_path):
    store.commit("g", None, clock=1)
    (tmp_path / GROUPS_DIR / "zz-not-hex.pos").write_text("x")
    (tmp_path / GROUPS_DIR / "README").write_text("x")
    assert store.groups() == ["g"]
