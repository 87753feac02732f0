"""`kdelay compact` and what the read-only tools say about compacted segments: verify accepts
offset gaps only where compaction made them, dump-log and rebuild-index handle them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000  # long before the wall clock: records due then are long due
CFG = LogConfig(segment_bytes=1500, index_interval_bytes=128)


def kdelay(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KDELAY_")}
    return subprocess.run([sys.executable, "-m", "kdelay", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def _build(path: str) -> set[int]:
    """A log whose batches are due at T0, except every 5th, due in 30 days of wall time;
    returns the pinned offsets."""
    far = time.time_ns() // 1_000_000 + 30 * 86_400_000
    pinned = set()
    with Log.open(path, config=CFG, clock=lambda: T0) as log:
        for i in range(40):
            res = log.append([Record(b"v%d-%d" % (i, k) * 3) for k in range(4)],
                             deliver_after=far if i % 5 == 0 else T0)
            if i % 5 == 0:
                pinned.update(range(res.base_offset, res.last_offset + 1))
    return pinned


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("c") / "p")
    pinned = _build(path)
    r = kdelay("compact", path, "--retention-ms", "3600000", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["segments_rewritten"] >= 3 and rep["bytes_after"] < rep["bytes_before"] / 2
    return path, pinned


def test_compact_keeps_pinned_and_verify_is_ok(compacted):
    path, pinned = compacted
    with Log.open(path, config=CFG) as log:
        got = {r.offset for r in log.read(0, max_records=10_000)}
    assert pinned <= got
    r = kdelay("verify", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            d = kdelay("dump-log", os.path.join(path, name), "--json")
            assert d.returncode == 0, d.stderr


def test_gap_without_marker_is_damage(compacted, tmp_path):
    path, _ = compacted
    copy = str(tmp_path / "p")
    shutil.copytree(path, copy)
    markers = [n for n in os.listdir(copy) if n.endswith(".compacted")]
    assert markers
    os.unlink(os.path.join(copy, markers[0]))
    r = kdelay("verify", copy)
    assert r.returncode == 1 and "gap" in r.stdout, r.stdout


def test_damaged_base_offset_in_compacted_segment_is_reported(compacted, tmp_path):
    """A base offset moved forward by one passes as a compaction gap to a scan; the
    marker's checksum of the base offsets shows the damage to verify, and to
    rebuild-index, which leaves the segment alone."""
    path, _ = compacted
    copy = str(tmp_path / "p")
    shutil.copytree(path, copy)
    log_path = os.path.join(copy, sorted(n for n in os.listdir(copy)
                                         if n.endswith(".compacted"))[0][:-10] + ".log")
    with open(log_path, "r+b") as f:
        head = bytearray(f.read(12))
        size = int.from_bytes(head[8:12], "big")
        f.seek(12 + size + 7)  # the low byte of the second batch's base offset
        low = f.read(1)[0]
        f.seek(12 + size + 7)
        f.write(bytes([low + 1]))
    r = kdelay("verify", copy)
    assert r.returncode == 1 and "checksum in its marker" in r.stdout, r.stdout
    r = kdelay("rebuild-index", copy)
    assert r.returncode == 1 and "NOT rebuilt" in r.stderr, r.stdout + r.stderr


def test_damaged_marker_is_reported_and_repaired_on_open(compacted, tmp_path):
    path, pinned = compacted
    copy = str(tmp_path / "p")
    shutil.copytree(path, copy)
    marker = os.path.join(copy, sorted(n for n in os.listdir(copy)
                                       if n.endswith(".compacted"))[0])
    with open(marker, "r+b") as f:
        f.write(b"X")
    r = kdelay("verify", copy)
    assert r.returncode == 1 and "marker" in r.stdout
    with Log.open(copy, config=CFG) as log:
        assert pinned <= {r.offset for r in log.read(0, max_records=10_000)}
    assert kdelay("verify", copy).returncode == 0


def test_rebuild_index_on_compacted_segments(compacted, tmp_path):
    path, pinned = compacted
    copy = str(tmp_path / "p")
    shutil.copytree(path, copy)
    for n in os.listdir(copy):
        if n.endswith((".index", ".timeindex", ".dlyindex")):
            os.unlink(os.path.join(copy, n))
    r = kdelay("rebuild-index", copy)
    assert r.returncode == 0, r.stderr
    assert kdelay("verify", copy).returncode == 0


def test_compact_refuses_while_locked(tmp_path):
    path = str(tmp_path / "p")
    _build(path)
    with Log.open(path, config=CFG):
        r = kdelay("compact", path, "--retention-ms", "3600000")
    assert r.returncode == 1 and "locked" in r.stderr, r.stderr
    assert not [n for n in os.listdir(path) if n.endswith(".compacted")]


def test_compact_arguments(tmp_path):
    assert kdelay("compact", str(tmp_path / "missing")).returncode == 2
    path = str(tmp_path / "p")
    _build(path)
    assert kdelay("compact", path, "--min-ratio", "1.5").returncode == 2
    r = kdelay("compact", path, "--retention-ms", "3600000", "--min-ratio", "0")
    assert r.returncode == 0 and "0 segment(s) rewritten" in r.stdout


def test_compact_says_why_nothing_was_reclaimed(tmp_path):
    """Every record long due, but all in the active segment: the report says that the
    active segment is never compacted, and how to get it sealed."""
    path = str(tmp_path / "p")
    with Log.open(path, config=CFG, clock=lambda: T0) as log:
        log.append([Record(b"done %d" % i) for i in range(10)])
    r = kdelay("compact", path, "--retention-ms", "0")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert "0 segment(s) rewritten" in line and "(0 B reclaimed): the active segment (" in line
    assert "is never rewritten or deleted: roll it (log.roll()), or lower segment_bytes or " \
           "segment_ms" in line
    assert "no sealed segment" not in line  # there is none
    r = kdelay("compact", path, "--retention-ms", "0", "--min-ratio", "0")
    assert r.stdout.strip().endswith("(0 B reclaimed): compaction is off (--min-ratio 0)")


def test_why_nothing_reclaimed():
    from kdelay import CompactionResult
    from kdelay.tools.compact import why_nothing_reclaimed

    assert why_nothing_reclaimed(CompactionResult(2, 900, 300, active_segment_bytes=100),
                                 0.5) is None
    assert why_nothing_reclaimed(CompactionResult(), 0.5) is None  # an empty log
    sealed_only = why_nothing_reclaimed(CompactionResult(0, 900, 900), 0.5)
    assert sealed_only == "no sealed segment has 50% of its bytes removable"
    both = why_nothing_reclaimed(CompactionResult(0, 900, 900, active_segment_bytes=100), 0.25)
    assert both.startswith("no sealed segment has 25% of its bytes removable; the active "
                           "segment (100 B) is never rewritten")
