"""Damage and recovery: what Log.open must repair, what reads must refuse, and the lock."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import T0

from kdelay import CorruptLogError, DeliveryKey, Log, LogConfig, LogLockedError, Record, fsio
from kdelay.log.batch import codec
from kdelay.log.segments.layout import segment_name

FAR = T0 + 10**9  # a clock at which everything in these logs is due
SEG = [0, 6, 12]  # base offsets of the fixture log's segments (the last one is active)


def _name(base: int, suffix: str) -> str:
    return segment_name(base) + suffix


def _batch_positions(log_path: str) -> list[tuple[int, codec.BatchHeader]]:
    data = Path(log_path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        h = codec.parse_header(data, pos)
        out.append((pos, h))
        pos += h.size
    return out


def _build(path: str, clock, *, close: bool = True) -> Log:
    """Three segments of two-record and one-record batches with mixed deliverAfters."""
    log = Log.open(path, config=LogConfig(index_interval_bytes=1), clock=clock)
    i = 0
    for seg in range(3):
        for j, n in enumerate((2, 1, 3)):
            da = T0 + ((seg * 7 + j * 13) % 5) * 100
            log.append([Record(b"r%d" % (i + k), key=b"k") for k in range(n)], deliver_after=da)
            i += n
        if seg < 2:
            log.roll()
    assert log.segments == SEG
    if close:
        log.close()
    return log


def _snapshot(log: Log) -> tuple[list, list]:
    fetched, after = [], None
    while True:
        res = log.fetch(after, max_records=4)
        if not res.records:
            break
        fetched += [(r.offset, r.deliver_after, r.value) for r in res.records]
        after = res.next
    read = [(r.offset, r.deliver_after, r.value) for r in log.read(0)]
    return fetched, read


@pytest.fixture
def built(log_dir, clock):
    clock.t = FAR
    _build(log_dir, clock)
    with Log.open(log_dir, clock=clock) as log:
        baseline = _snapshot(log)
    assert len(baseline[1]) == 18
    return log_dir, baseline


# ---------------------------------------------------------------------------- indexes

def _damage_index(path: str, how: str, other: str) -> None:
    if how == "delete":
        os.unlink(path)
    elif how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif how == "truncate_to_zero":
        with open(path, "r+b") as f:
            f.truncate(0)
    elif how == "garble":
        raw = bytearray(Path(path).read_bytes())
        for i in range(10, len(raw), 7):
            raw[i] ^= 0x5A
        Path(path).write_bytes(bytes(raw))
    elif how == "garble_body":
        raw = bytearray(Path(path).read_bytes())
        raw[-2] ^= 0x01
        Path(path).write_bytes(bytes(raw))
    elif how == "swap":
        tmp = path + ".swap"
        os.replace(path, tmp)
        os.replace(other, path)
        os.replace(tmp, other)


@pytest.mark.parametrize("suffix", [".dlyindex", ".index", ".timeindex"])
@pytest.mark.parametrize("how", ["delete", "truncate", "truncate_to_zero", "garble",
                                 "garble_body", "swap"])
def test_damaged_sealed_index_is_rebuilt(built, clock, suffix, how):
    path, baseline = built
    target = os.path.join(path, _name(6, suffix))
    other = os.path.join(path, _name(0, suffix))
    _damage_index(target, how, other)
    with Log.open(path, clock=clock) as log:
        assert log.load_report.indexes_rebuilt >= 3
        assert log.load_report.problems
        assert _snapshot(log) == baseline
        log.append([Record(b"new")])
    # the rebuilt index was persisted: the next clean open trusts it and rebuilds nothing
    with Log.open(path, clock=clock) as log:
        assert log.load_report.indexes_rebuilt == 0
        fetched, read = _snapshot(log)
        assert read[:-1] == baseline[1] and read[-1][2] == b"new"


def test_damaged_active_segment_index_is_rebuilt(built, clock):
    path, baseline = built
    os.unlink(os.path.join(path, _name(12, ".dlyindex")))
    with Log.open(path, clock=clock) as log:
        assert _snapshot(log) == baseline


def test_clean_reopen_reads_no_log_data_and_rebuilds_nothing(built, clock, monkeypatch):
    path, baseline = built
    index_files = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)
                   if n.endswith(("index", ".dlyindex"))}
    reads: list[tuple[str, int, int]] = []
    real_pread = os.pread

    def spy(fd, n, pos):
        reads.append((os.readlink(f"/proc/self/fd/{fd}"), n, pos))
        return real_pread(fd, n, pos)

    monkeypatch.setattr(os, "pread", spy)
    monkeypatch.setattr(fsio, "pread", spy)
    log = Log.open(path, clock=clock)
    monkeypatch.undo()
    try:
        assert [r for r in reads if r[0].endswith(".log")] == []
        rep = log.load_report
        assert rep.clean and rep.indexes_rebuilt == 0 and rep.segments_scanned == 0
        assert rep.bytes_scanned == 0 and rep.problems == []
        assert {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in index_files} == \
            index_files
        assert _snapshot(log) == baseline
    finally:
        log.close()


# ---------------------------------------------------------------------------- unclean tail

def _unclean_copy(src: str, dst: str, clock) -> str:
    """A copy of a log taken while it is open and has been written to (after flush): a
    crash image. (Opened but unwritten, it would still carry its clean-shutdown marker.)"""
    log = Log.open(src, clock=clock)
    log.flush()
    shutil.copytree(src, dst)
    log.close()
    marker = os.path.join(dst, ".kdelay_cleanshutdown")
    assert os.path.exists(marker)  # nothing was written since the clean open
    os.unlink(marker)  # what a crash after the first write would leave
    return dst


def _damage_tail(log_path: str, how: str) -> int:
    """Damage the active segment; returns the byte count that must survive."""
    batches = _batch_positions(log_path)
    last_pos, last = batches[-1]
    raw = bytearray(Path(log_path).read_bytes())
    if how == "torn_mid_batch":
        del raw[last_pos + last.size // 2:]
    elif how == "torn_mid_header":
        del raw[last_pos + 30:]
    elif how == "garbage_appended":
        raw += os.urandom(100)
        last_pos = len(raw) - 100
    elif how == "zeros_appended":
        raw += bytes(4096)
        last_pos = len(raw) - 4096
    elif how == "bit_flip_last_batch":
        raw[last_pos + last.size - 3] ^= 0x04
    elif how == "bit_flip_deliver_after":
        raw[last_pos + codec.DELIVER_AFTER_OFFSET + 7] ^= 0x01
    elif how == "bad_base_offset":
        raw[last_pos + 7] ^= 0x01
    elif how == "bit_flip_middle_batch":
        last_pos, mid = batches[1]
        raw[last_pos + mid.size - 1] ^= 0x80
    Path(log_path).write_bytes(bytes(raw))
    return last_pos


@pytest.mark.parametrize("how", ["torn_mid_batch", "torn_mid_header", "garbage_appended",
                                 "zeros_appended", "bit_flip_last_batch",
                                 "bit_flip_deliver_after", "bad_base_offset",
                                 "bit_flip_middle_batch"])
def test_unclean_tail_is_truncated(built, clock, tmp_path, how):
    path, (_, read_base) = built
    crash = _unclean_copy(path, os.fspath(tmp_path / "crash"), clock)
    active = os.path.join(crash, _name(12, ".log"))
    keep = _damage_tail(active, how)
    survivors = [r for r in read_base
                 if r[0] < 12 + sum(h.record_count for p, h in _batch_positions_upto(
                     os.path.join(path, _name(12, ".log")), keep))]
    with Log.open(crash, clock=clock) as log:
        rep = log.load_report
        assert not rep.clean
        assert os.path.getsize(active) == keep
        if keep < os.path.getsize(os.path.join(path, _name(12, ".log"))) or "appended" in how:
            assert rep.bytes_truncated > 0 and rep.problems
        fetched, read = _snapshot(log)
        assert read == survivors
        assert sorted(fetched) == sorted(survivors)
        res = log.append([Record(b"after-crash")])
        assert res.base_offset == survivors[-1][0] + 1
    with Log.open(crash, clock=clock) as log:
        assert log.load_report.clean
        assert [r.value for r in log.read(0)][-1] == b"after-crash"


def _batch_positions_upto(log_path: str, end: int):
    return [(p, h) for p, h in _batch_positions(log_path) if p < end]


def test_unclean_with_intact_tail_loses_nothing(built, clock, tmp_path):
    path, baseline = built
    crash = _unclean_copy(path, os.fspath(tmp_path / "crash"), clock)
    with Log.open(crash, clock=clock) as log:
        assert not log.load_report.clean
        assert log.load_report.bytes_truncated == 0
        assert _snapshot(log) == baseline


def test_unclean_recovery_rescans_segments_past_the_recovery_point(log_dir, clock, tmp_path):
    """A crash image whose active segment holds damage and whose sealed ones are intact:
    sealed segments before the recovery point are trusted, not rescanned."""
    clock.t = FAR
    log = _build(log_dir, clock, close=False)
    log.flush()
    crash = os.fspath(tmp_path / "crash")
    shutil.copytree(log_dir, crash)
    log.close()
    with Log.open(crash, clock=clock) as log2:
        rep = log2.load_report
        assert rep.segments_scanned == 1  # only the active one
        assert len(log2.read(0)) == 18


# ---------------------------------------------------------------------------- sealed damage

def _flip_sealed(path: str, base: int, batch_no: int, where: str) -> tuple[str, int]:
    log_path = os.path.join(path, _name(base, ".log"))
    pos, h = _batch_positions(log_path)[batch_no]
    raw = bytearray(Path(log_path).read_bytes())
    at = {"record": pos + h.size - 2, "deliver_after": pos + codec.DELIVER_AFTER_OFFSET + 6,
          "crc": pos + 18, "base_offset": pos + 7, "magic": pos + 16,
          "batch_length": pos + 11, "count": pos + 68}[where]
    raw[at] ^= 0x01
    Path(log_path).write_bytes(bytes(raw))
    return log_path, pos


@pytest.mark.parametrize("where", ["record", "deliver_after", "crc", "base_offset", "magic",
                                   "batch_length", "count"])
def test_corrupt_sealed_batch_raises_on_read(built, clock, where):
    path, (fetched_base, read_base) = built
    log_path, pos = _flip_sealed(path, 6, 1, where)  # offsets 8 (one record)
    with Log.open(path, clock=clock) as log:
        with pytest.raises(CorruptLogError) as ei:
            log.read(0)
        _check_error(ei.value, log_path, pos)
        with pytest.raises(CorruptLogError) as ei:
            log.read(8)
        _check_error(ei.value, log_path, pos)
        # reads that stop before the damage, or start after it, still work
        assert [r[0] for r in read_base[:8]] == [r.offset for r in log.read(0, max_records=8)]
        assert [r.offset for r in log.read(9, max_records=3)] == [9, 10, 11]
        # a fetch whose page would reach the damaged batch raises rather than return it
        got, after, err = [], None, None
        for _ in range(30):
            try:
                res = log.fetch(after, max_records=1)
            except CorruptLogError as e:
                err = e
                break
            if not res.records:
                break
            got += [r.offset for r in res.records]
            after = res.next
        assert err is not None, "fetch walked over a corrupt batch"
        _check_error(err, log_path, pos)
        assert 8 not in got
        # ...and the consumer can step over it with a DeliveryKey cursor past the batch
        da8 = next(r[1] for r in fetched_base if r[0] == 8)
        rest = log.fetch(DeliveryKey(da8, 8), max_records=500).records
        assert 8 not in [r.offset for r in rest]


def _check_error(err: CorruptLogError, log_path: str, pos: int) -> None:
    assert err.path == log_path and err.position == pos, (err, pos)
    assert os.path.basename(log_path) in str(err) and str(pos) in str(err)


def test_corrupt_sealed_batch_with_missing_index(built, clock):
    """The index is rebuilt by a scan that stops at the damage: the records behind it must
    not silently vanish from fetch, and the damaged batch must never be returned."""
    path, (fetched_base, read_base) = built
    log_path, pos = _flip_sealed(path, 6, 1, "record")
    os.unlink(os.path.join(path, _name(6, ".dlyindex")))
    with Log.open(path, clock=clock) as log:
        assert any("damaged" in p or "corrupt" in p.lower() or "crc" in p.lower()
                   for p in log.load_report.problems), log.load_report.problems
        offsets, after = [], None
        try:
            while True:
                res = log.fetch(after, max_records=500)
                if not res.records:
                    break
                offsets += [r.offset for r in res.records]
                after = res.next
        except CorruptLogError as e:
            _check_error(e, log_path, pos)
            return
        assert 8 not in offsets
        missing = {r[0] for r in read_base} - set(offsets)
        assert missing == {8}, f"records {sorted(missing)} silently vanished"


# ---------------------------------------------------------------------------- lock

def test_second_open_in_process_is_refused(open_log, log_dir, clock):
    log = open_log()
    with pytest.raises(LogLockedError):
        Log.open(log_dir, clock=clock)
    log.append([Record(b"still works")])
    log.close()
    Log.open(log_dir, clock=clock).close()


_CHILD = textwrap.dedent("""
    import sys, time
    from kdelay import Log, LogLockedError, Record
    try:
        log = Log.open(sys.argv[1])
    except LogLockedError:
        print("locked", flush=True)
        sys.exit(0)
    log.append([Record(b"child")])
    print("opened", flush=True)
    if sys.argv[2] == "hold":
        time.sleep(60)
    log.close()
""")


def test_open_from_another_process_is_refused(open_log, log_dir):
    log = open_log()
    out = subprocess.run([sys.executable, "-c", _CHILD, log_dir, "exit"], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "locked", out.stderr
    log.close()
    out = subprocess.run([sys.executable, "-c", _CHILD, log_dir, "exit"], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "opened", out.stderr


def test_lock_of_killed_process_does_not_block(log_dir, clock):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, log_dir, "hold"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "opened"
        with pytest.raises(LogLockedError):
            Log.open(log_dir, clock=clock)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert os.path.exists(os.path.join(log_dir, ".lock"))  # the file stays; the lock does not
    with Log.open(log_dir, clock=clock) as log:
        assert not log.load_report.clean
        assert [r.value for r in log.read(0)] == [b"child"]
