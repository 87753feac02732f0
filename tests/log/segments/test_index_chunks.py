"""A Log over index files whose chunks are checked as reads reach them
(kdelay/index/chunk_checks.py): a clean open reads headers, chunk tables and each index's
first and last chunk; a damaged chunk elsewhere fails the reads that need it, naming the
file and byte, while other reads go on; the next open rebuilds that index from the .log;
verify and dump-index name the damaged entries; indexes written in format version 1 open
and read as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import T0, FakeClock, chunks_of, rewrite_as_version_1, run_cli

from kdelay import CorruptLogError, Log, LogConfig, Record
from kdelay.index.index_file import HEADER_SIZE
from kdelay.log.segments.layout import CANCEL_INDEX_SUFFIX, INDEX_SUFFIXES, segment_file

CFG = LogConfig(index_interval_bytes=1)  # an offset and a time index entry per batch
BATCHES = 20  # per segment: five chunks of 4 entries in each index
LATER = T0 + 10**6


def _write(d: str, segments: int = 3) -> list[int]:
    """A closed log whose index files have chunks of 4 entries; its segment bases."""
    with chunks_of(4), Log.open(d, config=CFG, clock=FakeClock()) as log:
        for s in range(segments):
            for i in range(BATCHES):
                log.append([Record(b"s%d-%d" % (s, i))], deliver_after=T0 + (i * 7) % 13)
            if s < segments - 1:
                log.roll()
        return log.segments


def _drain(log: Log) -> list[tuple[int, int, bytes]]:
    out, after = [], None
    while True:
        page = log.fetch(after, max_records=7)
        if not page.records:
            return out
        out += [(r.deliver_after, r.offset, r.value) for r in page.records]
        after = page.next


def _open(d: str) -> Log:
    return Log.open(d, config=CFG, clock=FakeClock(LATER))


def _damage(path: str, entry: int) -> int:
    """Flip a bit of entry `entry` of the index's first column; returns where the chunk
    holding it starts in the file."""
    raw = bytearray(Path(path).read_bytes())
    raw[HEADER_SIZE + 8 * entry] ^= 0x04
    Path(path).write_bytes(bytes(raw))
    return HEADER_SIZE + 8 * (entry // 4 * 4)


def _every_read(log: Log) -> list:
    return log.read(0, max_records=1000)


@pytest.mark.parametrize("which", [0, -1], ids=["sealed", "active"])
@pytest.mark.parametrize("suffix", [".dlyindex", ".index"])
def test_a_damaged_chunk_fails_the_reads_needing_it_until_the_next_open(log_dir, which,
                                                                        suffix):
    bases = _write(log_dir)
    with _open(log_dir) as log:
        want, records = _drain(log), _every_read(log)
    path = segment_file(log_dir, bases[which], suffix)
    position = _damage(path, 9)  # the middle chunk: entries 8..11

    with _open(log_dir) as log:
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []
        fails, works = (_drain, _every_read) if suffix == ".dlyindex" else \
            (lambda log: log.read(bases[which] + 11, max_records=1), _drain)
        with pytest.raises(CorruptLogError, match="fail their chunk checksum") as caught:
            fails(log)
        assert (caught.value.path, caught.value.position) == (path, position)
        with pytest.raises(CorruptLogError):  # every time, never a wrong answer
            fails(log)
        assert works(log) == (want if works is _drain else records)
    assert not os.path.exists(path)  # so the next open rebuilds it

    with _open(log_dir) as log:
        assert log.load_report.indexes_rebuilt == 3
        assert _drain(log) == want and _every_read(log) == records
    with _open(log_dir) as log:
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []


def test_a_close_that_must_rewrite_a_damaged_index_fails_and_the_open_recovers(log_dir):
    """The active segment's index is rewritten on close, from every entry: a damaged one
    is never written out under fresh checksums. Close raises, leaves the log unclean, and
    the next open recovers the segment from its .log, appends included."""
    bases = _write(log_dir)
    with _open(log_dir) as log:
        want = _drain(log)
    _damage(segment_file(log_dir, bases[-1], ".dlyindex"), 13)
    log = _open(log_dir)
    with pytest.raises(CorruptLogError):
        _drain(log)
    res = log.append([Record(b"after")], deliver_after=T0)
    with pytest.raises(CorruptLogError):
        log.close()
    with _open(log_dir) as log:
        assert not log.load_report.clean
        assert _drain(log) == sorted([*want, (res.deliver_after, res.base_offset, b"after")])


def test_verify_and_dump_index_name_each_damaged_chunk(log_dir):
    bases = _write(log_dir)
    path = segment_file(log_dir, bases[1], ".dlyindex")
    position = _damage(path, 5)
    _damage(path, 14)
    rc, out, _ = run_cli("verify", log_dir)
    assert rc == 1
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    assert len(problems) == 2
    assert f"{path} at byte {position}" in problems[0] and "entries 4..7" in problems[0]
    assert "entries 12..15: chunk checksum mismatch" in problems[1]
    rc, out, err = run_cli("dump-index", path)
    assert rc == 1 and "entries 4..7, 12..15" in err
    assert len(out.splitlines()) > BATCHES  # the entries are still shown


def test_indexes_of_format_version_1_open_and_read_as_before(log_dir):
    bases = _write(log_dir)
    with Log.open(log_dir, config=CFG, clock=FakeClock(T0)) as log:
        assert log.cancel([3, bases[1] + 2]) == 2  # not due yet
    with _open(log_dir) as log:
        want, records = _drain(log), _every_read(log)
    old = [segment_file(log_dir, b, s) for b in bases for s in (*INDEX_SUFFIXES,
                                                                 CANCEL_INDEX_SUFFIX)]
    old = [p for p in old if os.path.exists(p)]
    assert any(p.endswith(CANCEL_INDEX_SUFFIX) for p in old)
    for p in old:
        rewrite_as_version_1(p)
    assert run_cli("verify", log_dir)[0] == 0

    with _open(log_dir) as log:
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []
        assert _drain(log) == want and _every_read(log) == records
        log.append([Record(b"new")], deliver_after=T0)  # the active segment is rewritten
    versions = {p: Path(p).read_bytes()[7:8] for p in old}
    active = [p for p in old if p.startswith(segment_file(log_dir, bases[-1], ""))
              and not p.endswith(CANCEL_INDEX_SUFFIX)]
    assert {versions[p] for p in active} == {b"2"}
    assert {versions[p] for p in set(old) - set(active)} == {b"1"}  # sealed: as they were
    with _open(log_dir) as log:
        assert log.load_report.indexes_rebuilt == 0 and log.load_report.problems == []
        assert len(_drain(log)) == len(want) + 1
