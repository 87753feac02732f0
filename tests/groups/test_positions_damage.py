"""Damage to a real commit journal (kdelay.groups.positions): what a crash mid-append can
leave (a tail cut short, garbled or followed by garbage) is cut off at the next commit and
the acknowledged positions before it stand; damage a crash cannot leave (a flipped byte
with sound records after it, a damaged header) is refused with a CorruptLogError naming
the file and byte, for every group of the log, while the log itself still opens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdelay import DeliveryKey, Log, Record
from kdelay.errors import CorruptLogError
from kdelay.groups.journal_format import HEADER_SIZE, scan
from kdelay.groups.positions import GROUPS_DIR, JOURNAL_FILE, GroupStore
from kdelay.testing.damage import flip_byte

T0 = 1_700_000_000_000


def build(tmp_path) -> tuple[Path, list[int]]:
    """Three appends: a (1,1) and b; then a (2,2); then the last, a (3,3) with c. Returns
    the journal and where each append starts."""
    store = GroupStore(os.fspath(tmp_path))
    store.commit_many({"a": DeliveryKey(1, 1), "b": None}, clock=1)  # makes the journal
    p = tmp_path / GROUPS_DIR / JOURNAL_FILE
    starts = [HEADER_SIZE]
    for clock, batch in ((2, {"a": DeliveryKey(2, 2)}),
                         (3, {"a": DeliveryKey(3, 3), "c": DeliveryKey(9, 9)})):
        starts.append(p.stat().st_size)
        store.commit_many(batch, clock=clock)
    store.close()
    return p, starts


@pytest.mark.parametrize("how", ["cut_in_last_record", "cut_in_last_append",
                                 "flip_in_last_append", "garbage_tail"])
def test_a_torn_tail_is_cut_and_the_positions_before_it_stand(tmp_path, how):
    p, starts = build(tmp_path)
    raw = p.read_bytes()
    if how == "cut_in_last_record":
        p.write_bytes(raw[:-5])  # c's record torn: a's of the same append landed
        want = {"a": DeliveryKey(3, 3), "c": None}
    elif how == "cut_in_last_append":
        p.write_bytes(raw[:starts[2] + 10])
        want = {"a": DeliveryKey(2, 2), "c": None}
    elif how == "flip_in_last_append":
        flip_byte(p, starts[2] + 20, 0x10)  # its first record: the second one cannot vouch
        want = {"a": DeliveryKey(2, 2), "c": None}
    else:
        p.write_bytes(raw + b"\x01\x00garbage\x00" * 20)
        want = {"a": DeliveryKey(3, 3), "c": DeliveryKey(9, 9)}
    store = GroupStore(os.fspath(tmp_path))
    assert {g: store.committed(g) for g in ("a", "c")} == want
    assert store.committed("b") is None and store.has_position("b")
    store.commit("d", DeliveryKey(4, 4), clock=4)  # cuts the tail off first
    found = scan(p.read_bytes(), os.fspath(p))
    assert found.damage is None and found.torn is None
    again = GroupStore(os.fspath(tmp_path))
    assert {g: again.committed(g) for g in ("a", "c", "d")} == {**want, "d": DeliveryKey(4, 4)}


@pytest.mark.parametrize("where", ["first_append", "second_append"])
def test_a_flipped_byte_before_sound_records_is_refused_with_file_and_byte(tmp_path, where):
    p, starts = build(tmp_path)
    at = starts[0] if where == "first_append" else starts[1]
    flip_byte(p, at + 20, 0x10)
    raw = p.read_bytes()
    store = GroupStore(os.fspath(tmp_path))
    with pytest.raises(CorruptLogError) as e:
        store.committed("b")
    assert e.value.path == os.fspath(p) and e.value.position == at
    assert f"at byte {at}" in str(e.value) and "damaged" in str(e.value)
    for call in (lambda: store.commit("a", None, clock=9), lambda: store.has_position("a"),
                 lambda: store.commit_many({"x": None}, clock=9),
                 lambda: store.delete("a", clock=9)):
        with pytest.raises(CorruptLogError):
            call()
    assert store.max_clock() == 3  # the sound records' clocks still count
    assert p.read_bytes() == raw  # nothing rewritten over the damage


@pytest.mark.parametrize("how", ["flip", "cut", "empty"])
def test_a_damaged_header_is_refused_at_byte_0(tmp_path, how):
    p, _ = build(tmp_path)
    if how == "flip":
        flip_byte(p, 6, 0x01)
    elif how == "cut":
        p.write_bytes(p.read_bytes()[:HEADER_SIZE - 3])
    else:
        p.write_bytes(b"")
    with pytest.raises(CorruptLogError) as e:
        GroupStore(os.fspath(tmp_path)).committed("a")
    assert e.value.path == os.fspath(p) and e.value.position == 0


def test_a_log_with_a_damaged_journal_opens_and_reports_it_in_metrics(tmp_path):
    path = os.fspath(tmp_path / "p")
    with Log.open(path, clock=lambda: T0) as log:
        log.append([Record(b"a"), Record(b"b"), Record(b"c")])
        for g in ("good", "bad", "other"):
            log.commit(g, DeliveryKey(T0, 0))
    p = os.path.join(path, GROUPS_DIR, JOURNAL_FILE)
    flip_byte(p, HEADER_SIZE + 20, 0x10)  # good's record, the others vouch for it
    with Log.open(path, clock=lambda: T0) as log:
        m = log.metrics()  # must not raise
        assert sorted(m["groups"]) == ["bad", "other"]  # good's name is in the damage
        for g in ("bad", "other"):
            assert m["groups"][g]["committed"] is None
            assert p in m["groups"][g]["error"] and "damaged" in m["groups"][g]["error"]
        with pytest.raises(CorruptLogError):
            log.committed("other")
        with pytest.raises(CorruptLogError):
            log.commit("other", DeliveryKey(T0, 1))
        log.append([Record(b"d")])  # the records themselves are served
        assert len(log.fetch(max_records=10).records) == 4
