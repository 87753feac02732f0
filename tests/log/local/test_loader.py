"""The loader (kdelay.log.local.loader) on its own: clean open, unclean recovery, leftovers,
overlap refusal, the recovery point and the clean-shutdown marker's clock, and the repair
of a damaged index (persisted once, atomically)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import T0
from hypothesis import given
from hypothesis import strategies as st

from kdelay import CorruptLogError, Log, LogConfig, LogLockedError, Record
from kdelay.errors import IndexFileError
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.offset_index import OffsetIndex
from kdelay.index.time_index import TimeIndex
from kdelay.log.local import directory_lock, loader
from kdelay.log.segments import recovery_point
from kdelay.log.segments.layout import (
    HORIZON_FILE,
    INDEX_SUFFIXES,
    LOCK_FILE,
    LOG_SUFFIX,
    segment_file,
)
from kdelay.log.segments.segment import LogSegment

CFG = LogConfig(index_interval_bytes=1)
KINDS = {".index": OffsetIndex, ".timeindex": TimeIndex, ".dlyindex": DeliverAfterIndex}


def _write(d: str, rolls: int = 2, per_segment: int = 3) -> list[int]:
    """A closed log of `rolls + 1` segments; returns their base offsets."""
    with Log.open(d, config=CFG, clock=lambda: T0) as log:
        for s in range(rolls + 1):
            for i in range(per_segment):
                log.append([Record(b"s%d-%d" % (s, i))], deliver_after=T0 + 10 * i)
            if s < rolls:
                log.roll()
        return log.segments


def _load(d: str) -> tuple[list[LogSegment], loader.LoadReport]:
    return loader.load_segments(d, CFG.index_interval_bytes)


def _close(segments: list[LogSegment]) -> None:
    for seg in segments:
        seg.close()


def _garble(path: str) -> None:
    raw = bytearray(Path(path).read_bytes())
    for i in range(10, len(raw), 7):
        raw[i] ^= 0x5A
    Path(path).write_bytes(bytes(raw))


def _index_is_valid(d: str, base: int, suffix: str) -> bool:
    size = os.path.getsize(segment_file(d, base, LOG_SUFFIX))
    try:
        KINDS[suffix].load(segment_file(d, base, suffix), base_offset=base, log_bytes=size)
    except IndexFileError:
        return False
    return True


def _files(d: str) -> dict[str, tuple[int, int]]:
    return {n: (os.stat(os.path.join(d, n)).st_mtime_ns, os.path.getsize(os.path.join(d, n)))
            for n in sorted(os.listdir(d))}


# ---------------------------------------------------------------------------- clean open

def test_clean_open_loads_every_segment_from_its_indexes_and_writes_nothing(log_dir):
    bases = _write(log_dir)
    before = _files(log_dir)
    segments, report = _load(log_dir)
    try:
        assert [s.base_offset for s in segments] == bases
        assert report.clean and report.segments_scanned == 0 and report.indexes_rebuilt == 0
        assert report.bytes_scanned == 0 and report.orphans_removed == 0
        assert report.problems == []
        assert segments[-1].next_offset == 9
    finally:
        _close(segments)
    assert _files(log_dir) == before


def test_empty_directory_loads_nothing(log_dir):
    os.makedirs(log_dir)
    segments, report = _load(log_dir)
    assert segments == [] and report.problems == []


# ---------------------------------------------------------------------------- damaged index

@pytest.mark.parametrize("suffix", INDEX_SUFFIXES)
@pytest.mark.parametrize("which", ["active", "sealed"])
def test_damaged_index_is_repaired_once(log_dir, suffix, which):
    """open -> read -> close, with no append: the garbled index is rewritten (atomically,
    so valid on disk) and the next open rebuilds nothing."""
    bases = _write(log_dir)
    base = bases[-1] if which == "active" else bases[0]
    _garble(segment_file(log_dir, base, suffix))
    assert not _index_is_valid(log_dir, base, suffix)
    with Log.open(log_dir, config=CFG, clock=lambda: T0) as log:
        assert log.load_report.indexes_rebuilt == 3 and log.load_report.problems
        assert len(log.read(0, max_records=100)) == 9
    assert _index_is_valid(log_dir, base, suffix)
    assert not [n for n in os.listdir(log_dir) if n.endswith(".tmp")]
    with Log.open(log_dir, config=CFG, clock=lambda: T0) as log:
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []
        assert len(log.read(0, max_records=100)) == 9


def test_undamaged_clean_open_still_writes_nothing(log_dir):
    _write(log_dir)
    before = _files(log_dir)
    with Log.open(log_dir, config=CFG, clock=lambda: T0) as log:
        assert len(log.read(0, max_records=100)) == 9
    after = _files(log_dir)
    # the append horizon is the live writer's state for lock-free readers (never fsync'd,
    # rewritten by every open by design), not part of the log
    skip = {loader.CLEAN_SHUTDOWN_FILE, HORIZON_FILE}
    assert {n: v for n, v in after.items() if n not in skip} == \
        {n: v for n, v in before.items() if n not in skip}


# ---------------------------------------------------------------------------- unclean

def test_unclean_open_rescans_from_the_recovery_point_and_cuts_a_torn_tail(log_dir):
    bases = _write(log_dir)
    os.unlink(os.path.join(log_dir, loader.CLEAN_SHUTDOWN_FILE))
    recovery_point.write_recovery_point(log_dir, bases[-1])
    active = segment_file(log_dir, bases[-1], LOG_SUFFIX)
    whole = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(b"\x00\x01torn")
    segments, report = _load(log_dir)
    try:
        assert not report.clean
        assert report.segments_scanned == 1 and report.bytes_truncated == 6
        assert os.path.getsize(active) == whole
        assert segments[-1].next_offset == 9
    finally:
        _close(segments)


def test_unreadable_recovery_point_rescans_everything(log_dir):
    bases = _write(log_dir)
    os.unlink(os.path.join(log_dir, loader.CLEAN_SHUTDOWN_FILE))
    Path(log_dir, recovery_point.RECOVERY_POINT_FILE).write_text("garbage\n")
    assert recovery_point.read_recovery_point(log_dir) == 0
    segments, report = _load(log_dir)
    try:
        assert report.segments_scanned == len(bases) and report.bytes_truncated == 0
    finally:
        _close(segments)


def test_recovery_point_round_trips(log_dir):
    os.makedirs(log_dir)
    assert recovery_point.read_recovery_point(log_dir) == 0
    recovery_point.write_recovery_point(log_dir, 1234)
    assert recovery_point.read_recovery_point(log_dir) == 1234


def test_clock_floor_comes_from_the_clean_marker(log_dir):
    os.makedirs(log_dir)
    marker = Path(log_dir, loader.CLEAN_SHUTDOWN_FILE)
    assert loader.read_clock_floor(log_dir) == 0
    marker.write_text("12345")
    assert loader.read_clock_floor(log_dir) == 12345
    marker.write_text("not a number")
    assert loader.read_clock_floor(log_dir) == 0


# ---------------------------------------------------------------------------- directory

def test_leftovers_are_removed(log_dir):
    bases = _write(log_dir)
    orphans = [segment_file(log_dir, 999, ".index"), segment_file(log_dir, 999, ".dlyindex"),
               os.path.join(log_dir, "x.tmp"), segment_file(log_dir, bases[0], ".log.deleted")]
    for p in orphans:
        Path(p).write_bytes(b"junk")
    Path(log_dir, "unrelated.txt").write_text("kept")
    segments, report = _load(log_dir)
    _close(segments)
    assert report.orphans_removed == len(orphans)
    assert not any(os.path.exists(p) for p in orphans)
    assert os.path.exists(os.path.join(log_dir, "unrelated.txt"))


def test_overlapping_segments_are_refused(log_dir):
    bases = _write(log_dir)
    # a copy of the first segment renamed to start inside it: offsets would overlap
    src = segment_file(log_dir, bases[0], LOG_SUFFIX)
    Path(segment_file(log_dir, 1, LOG_SUFFIX)).write_bytes(Path(src).read_bytes())
    with pytest.raises(CorruptLogError, match="overlaps"):
        _load(log_dir)


def test_an_offset_gap_is_reported(log_dir):
    bases = _write(log_dir)
    for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
        os.unlink(segment_file(log_dir, bases[1], suffix))
    segments, report = _load(log_dir)
    _close(segments)
    assert [s.base_offset for s in segments] == [bases[0], bases[2]]
    assert any("offset gap" in p for p in report.problems)


def test_open_directory_creates_the_first_segment_and_holds_the_lock(log_dir):
    opened = loader.open_directory(log_dir, 4096)
    try:
        assert [s.base_offset for s in opened.segments] == [0]
        assert not opened.marker_present and opened.clock_floor == 0
        with pytest.raises(LogLockedError):
            directory_lock.take_lock(log_dir)
    finally:
        _close(opened.segments)
        os.close(opened.lock_fd)
    fd = directory_lock.take_lock(log_dir)  # released with its descriptor
    os.close(fd)


# ---------------------------------------------------------------------------- lock holder

_HOLDER = textwrap.dedent("""
    import sys, time
    from kdelay import Log
    log = Log.open(sys.argv[1])
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    log.close()
""")


def test_locked_error_names_the_holding_process_and_the_way_forward(log_dir):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, log_dir], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(LogLockedError) as caught:
            Log.open(log_dir)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert caught.value.pid == holder.pid
    msg = str(caught.value)
    assert f"locked by process {holder.pid};" in msg
    assert "share the Log between threads" in msg and "which take no lock" in msg
    assert "kdelay serve" in msg  # the way for many processes (issue 31, point 14)
    Log.open(log_dir).close()  # the holder is gone: the lock is free


def test_locked_error_in_the_holding_process_says_so(open_log, log_dir):
    open_log()
    with pytest.raises(LogLockedError) as caught:
        Log.open(log_dir)
    assert caught.value.pid == os.getpid()
    assert f"this process (pid {os.getpid()})" in str(caught.value)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def test_a_stale_pid_names_nobody(log_dir):
    """A lock held by a process that wrote no pid (the file still names a holder that
    died): the message names no one rather than the dead process."""
    os.makedirs(log_dir)
    path = os.path.join(log_dir, LOCK_FILE)
    Path(path).write_bytes(b"%d\n" % _dead_pid())
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LogLockedError) as caught:
            Log.open(log_dir)
    finally:
        os.close(fd)
    assert caught.value.pid is None and "locked by another open Log;" in str(caught.value)


@given(content=st.one_of(st.binary(max_size=40), st.integers().map(lambda n: b"%d\n" % n)))
def test_whatever_the_lock_file_holds_opening_works_and_records_our_pid(tmp_path_factory,
                                                                         content):
    directory = str(tmp_path_factory.mktemp("lock"))
    path = os.path.join(directory, LOCK_FILE)
    Path(path).write_bytes(content)
    fd = directory_lock.take_lock(directory)
    try:
        assert Path(path).read_bytes() == b"%d\n" % os.getpid()
    finally:
        os.close(fd)
