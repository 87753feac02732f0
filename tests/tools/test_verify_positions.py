"""`kdelay verify` on consumer groups' positions: the commit journal's header and every
record's CRC checked, damage a crash cannot leave is a problem named by file and byte, a
torn tail (what a crash mid-commit leaves) is noted without failing the check; per-group
files of earlier versions still present (not yet folded in) are checked slot by slot."""

from __future__ import annotations

import os
import subprocess
import sys

from kdelay import DeliveryKey, Log, Record
from kdelay.groups.journal_format import HEADER_SIZE, RECORD_OVERHEAD
from kdelay.groups.position_file import SLOT_SPAN, encode_slot
from kdelay.groups.positions import GROUPS_DIR, JOURNAL_FILE
from kdelay.testing.damage import flip_byte
from kdelay.tools.verify import verify_partition


def build(path: str) -> str:
    """A log whose groups "g" (twice) and "h" committed; its journal."""
    with Log.open(path) as log:
        log.append([Record(b"a"), Record(b"b")])
        log.commit("g", DeliveryKey(0, 0))
        log.commit("g", DeliveryKey(0, 1))
        log.commit("h", None)
    return os.path.join(path, GROUPS_DIR, JOURNAL_FILE)


def group_findings(rep) -> list:
    return [f for f in rep.findings if "group" in f.message]


def test_a_clean_journal_verifies_clean(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    build(path)
    rep = verify_partition(path)
    assert rep.ok and not group_findings(rep), rep.findings


def test_a_torn_tail_is_noted_not_failed(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    j = build(path)
    size = os.path.getsize(j)
    os.truncate(j, size - 7)  # the last commit's record cut short
    rep = verify_partition(path)
    assert rep.ok
    [note] = group_findings(rep)
    assert note.path == j and "torn tail" in note.message
    assert note.position == size - (RECORD_OVERHEAD + len("h"))  # where h's record began


def test_damage_before_sound_records_is_a_problem_named_by_file_and_byte(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    j = build(path)
    flip_byte(j, HEADER_SIZE + 30, 0x01)  # the first record; two sound ones follow
    r = subprocess.run([sys.executable, "-m", "kdelay", "verify", path], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 1, r.stdout
    assert j in r.stdout and "consumer group positions unreadable" in r.stdout
    [problem] = verify_partition(path).problems
    assert problem.path == j and problem.position == HEADER_SIZE


def test_a_damaged_header_is_a_problem(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    j = build(path)
    flip_byte(j, 2, 0x01)
    [problem] = verify_partition(path).problems
    assert problem.path == j and problem.position == 0 and "header" in problem.message


def test_files_of_earlier_versions_are_checked_slot_by_slot(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    with Log.open(path) as log:
        log.append([Record(b"a")])
    d = os.path.join(path, GROUPS_DIR)
    os.makedirs(d)
    older = encode_slot("g", 1, DeliveryKey(0, 0), 1)
    g = os.path.join(d, b"g".hex() + ".pos")
    with open(g, "wb") as f:
        f.write(older + bytes(SLOT_SPAN - len(older)) + encode_slot("g", 2, None, 2))
    flip_byte(g, SLOT_SPAN + 20, 0x01)
    rep = verify_partition(path)
    assert rep.ok
    [note] = group_findings(rep)
    assert note.path == g and note.position == SLOT_SPAN
    assert "slot 1 unreadable (checksum mismatch" in note.message
    flip_byte(g, 20, 0x01)
    [problem] = verify_partition(path).problems
    assert problem.path == g and "consumer group 'g' position unreadable" in problem.message
