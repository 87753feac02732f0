"""`kdelay verify` on consumer groups' position files: both slots and their CRCs checked,
damage reported with the file's name; a file with no valid slot fails the check, one damaged
slot (what a crash mid-commit leaves) is noted without failing it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kdelay import DeliveryKey, Log, Record
from kdelay.groups.position_file import SLOT_SPAN
from kdelay.testing.damage import flip_byte
from kdelay.tools.verify import verify_partition


def build(path: str) -> str:
    """A log whose group "g" has committed twice (both slots) and "h" once; g's file."""
    with Log.open(path) as log:
        log.append([Record(b"a"), Record(b"b")])
        log.commit("g", DeliveryKey(0, 0))
        log.commit("g", DeliveryKey(0, 1))
        log.commit("h", None)
    return os.path.join(path, "groups", b"g".hex() + ".pos")


def flip(p: str, at: int) -> None:
    flip_byte(p, at, 0x01)


def test_clean_files_verify_clean(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    build(path)
    rep = verify_partition(path)
    assert rep.ok and not [f for f in rep.findings if "group" in f.message], rep.findings


@pytest.mark.parametrize("slot", [0, 1])
def test_one_damaged_slot_is_noted_with_the_file(tmp_path, slot):
    path = os.fspath(tmp_path / "p-0")
    g = build(path)
    flip(g, slot * SLOT_SPAN + 40)
    rep = verify_partition(path)
    assert rep.ok
    [note] = [f for f in rep.findings if f.path == g]
    assert f"slot {slot} unreadable (checksum mismatch" in note.message
    assert note.position == slot * SLOT_SPAN


def test_no_valid_slot_is_a_problem_named_by_file(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    g = build(path)
    flip(g, 40)
    flip(g, SLOT_SPAN + 40)
    r = subprocess.run([sys.executable, "-m", "kdelay", "verify", path], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 1, r.stdout
    assert g in r.stdout and "consumer group 'g' position unreadable" in r.stdout
    assert "slot 0: checksum mismatch" in r.stdout and "slot 1: checksum mismatch" in r.stdout


def test_a_truncated_file_is_a_problem(tmp_path):
    path = os.fspath(tmp_path / "p-0")
    g = build(path)
    os.truncate(g, 10)
    [problem] = verify_partition(path).problems
    assert problem.path == g and "cut short" in problem.message
