"""The lazy open: after a clean close, a reopen reads no sealed segment's index (nor opens
its .log) until a read needs it, a first page touches only the segments it takes records
from, and damage to a deferred index or .log is still found when it is first read, with
what an eager open would have done about it (a rebuild; a damaged chunk fails its reads
with CorruptLogError, as tests/log/segments/test_index_chunks.py holds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdelay import Log, LogConfig, Record
from kdelay.index import base as index_base
from kdelay.log.segments import segment as segment_module
from kdelay.log.segments.layout import segment_bases, segment_file
from kdelay.log.segments.segment_summary import SUMMARY_FILE

T0 = 1_000_000
SEGMENTS = 12
CONFIG = LogConfig()


def _write(path: str, *, overlapping: bool = False) -> list[tuple[int, int, bytes]]:
    """SEGMENTS sealed segments of 5 batches of 3 records (+ an active one); segment i's
    records are due in [T0 + 1000 i, T0 + 1000 i + 50) unless `overlapping` (then all in
    one range). Returns (deliverAfter, offset, value) of every record, in due order."""
    out = []
    with Log.open(path, config=CONFIG, clock=lambda: T0) as log:
        for i in range(SEGMENTS + 1):
            for j in range(5):
                due = T0 + (0 if overlapping else 1000 * i) + 10 * j + i % 3
                res = log.append([Record(b"%d-%d-%d" % (i, j, k)) for k in range(3)],
                                 deliver_after=due)
                out += [(due, res.base_offset + k, b"%d-%d-%d" % (i, j, k)) for k in range(3)]
            if i < SEGMENTS:
                log.roll()
    return sorted(out)


@pytest.fixture
def opened(monkeypatch):
    """Every index file and .log the code under test opens, by path."""
    seen: dict[str, list[str]] = {"index": [], "log": []}
    real_map, real_open = index_base.map_index, segment_module.os.open

    def map_index(path, *args, **kw):
        seen["index"].append(os.path.basename(path))
        return real_map(path, *args, **kw)

    def os_open(path, *args, **kw):
        if str(path).endswith(".log"):
            seen["log"].append(os.path.basename(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(index_base, "map_index", map_index)
    monkeypatch.setattr(segment_module.os, "open", os_open)
    return seen


def _names(path: str, bases, suffix: str) -> set[str]:
    return {os.path.basename(segment_file(path, b, suffix)) for b in bases}


def _drain(log: Log, page: int = 7) -> list[tuple[int, int, bytes]]:
    out, after = [], None
    while (res := log.fetch(after, max_records=page)).records:
        out += [(r.deliver_after, r.offset, r.value) for r in res.records]
        after = res.next
    return out


def test_a_clean_reopen_reads_no_sealed_index_and_a_page_only_those_it_takes_from(
        tmp_path, opened):
    path = str(tmp_path)
    records = _write(path)
    bases = segment_bases(path)
    active = bases[-1]
    opened["index"].clear()
    opened["log"].clear()
    log = Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6)
    try:
        # the active segment is loaded whole; of the sealed ones, nothing
        assert set(opened["index"]) <= _names(path, [active], ".dlyindex") | _names(
            path, [active], ".index") | _names(path, [active], ".timeindex")
        assert set(opened["log"]) <= _names(path, [active], ".log")
        opened["index"].clear()
        opened["log"].clear()
        page = log.fetch(None, max_records=20)  # segment 0's 15 records, then segment 1's
        assert [(r.deliver_after, r.offset, r.value) for r in page.records] == records[:20]
        assert set(opened["index"]) == _names(path, bases[:2], ".dlyindex")
        assert set(opened["log"]) == _names(path, bases[:2], ".log")
        assert _drain(log) == records  # and the rest loads as the drain reaches it
    finally:
        log.close()


def test_overlapping_segments_drain_the_same_after_a_lazy_open(tmp_path):
    path = str(tmp_path)
    records = _write(path, overlapping=True)
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6) as log:
        assert _drain(log, page=4) == records


def test_reading_the_load_report_loads_every_deferred_index(tmp_path, opened):
    path = str(tmp_path)
    _write(path)
    sealed = segment_bases(path)[:-1]
    with Log.open(path, config=CONFIG, clock=lambda: T0) as log:
        opened["index"].clear()
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []
        assert set(opened["index"]) == (_names(path, sealed, ".dlyindex") |
                                        _names(path, sealed, ".index") |
                                        _names(path, sealed, ".timeindex"))


def _garble_header(path: str) -> None:
    raw = bytearray(Path(path).read_bytes())
    raw[20] ^= 0x5A  # inside the header (its CRC no longer holds): same size, same inode
    Path(path).write_bytes(bytes(raw))


@pytest.mark.parametrize("suffix", [".dlyindex", ".index", ".timeindex"])
def test_a_damaged_deferred_index_is_rebuilt_when_first_read(tmp_path, suffix):
    path = str(tmp_path)
    records = _write(path)
    base = segment_bases(path)[4]
    target = segment_file(path, base, suffix)
    _garble_header(target)
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6) as log:
        if suffix == ".dlyindex":
            assert _drain(log) == records
        else:
            assert [r.offset for r in log.read(base, max_records=3)] == [base, base + 1,
                                                                          base + 2]
        report = log.load_report
        assert report.indexes_rebuilt == 3
        assert any("rebuilding indexes" in p and os.path.basename(target) in p
                   for p in report.problems)
        assert _drain(log) == records
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6) as log:  # repaired once
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []
        assert _drain(log) == records


def test_a_log_changed_behind_a_clean_close_is_rebuilt_when_first_read(tmp_path):
    """Bytes appended to a sealed .log after the clean close: the open does not look, the
    first read of that segment finds the .log is not the size recorded and rebuilds its
    indexes from it (up to the damage), as an eager open finds them stale: every record
    is still read, and the report names both."""
    path = str(tmp_path)
    records = _write(path)
    base = segment_bases(path)[3]
    log_path = segment_file(path, base, ".log")
    with open(log_path, "ab") as f:
        f.write(b"\0" * 10)  # not a batch
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6) as log:
        first = log.fetch(None, max_records=15 * 3)  # segments 0..2 only: nothing seen yet
        assert [(r.deliver_after, r.offset, r.value) for r in first.records] == records[:45]
        assert _drain(log) == records
        problems = log.load_report.problems
        assert any("rebuilding indexes" in p and log_path in p for p in problems)
        assert any("damaged flushed segment" in p for p in problems)


def test_a_summary_that_does_not_match_the_directory_is_not_used(tmp_path, opened):
    path = str(tmp_path)
    records = _write(path)
    summary = os.path.join(path, SUMMARY_FILE)
    raw = bytearray(Path(summary).read_bytes())
    raw[30] ^= 1  # its checksum fails: every index is loaded at open, as without one
    Path(summary).write_bytes(bytes(raw))
    opened["index"].clear()
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6) as log:
        assert len(opened["index"]) == 3 * (SEGMENTS + 1)
        assert _drain(log) == records
