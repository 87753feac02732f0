"""The summary open (log/local/summary_open.py): after a clean close that vouched for the
directory's listing, an open makes no sealed segment until first used. Held here against
the full open of a copy of the same directory with no summary (every index loaded at open):
any sequence of first touches (fetches, reads, cancels, retention, compaction, the load
report that loads every deferred index, appends and rolls), then a close and a reopen,
gives the same answers and leaves directories the verifier passes. And a directory the
summary does not describe (a file added or removed, a summary from an earlier close, a
damaged one) is opened segment by segment, with the same records."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

from conftest import T0
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record
from kdelay.log.segments.layout import segment_bases, segment_file
from kdelay.log.segments.segment_summary import SUMMARY_FILE
from kdelay.tools.verify import verify_partition

SEALED = 6
CONFIG = LogConfig(retention_ms=2_000, compaction_min_ratio=0.3)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t


def _write(path: str, seed: int) -> None:
    """SEALED sealed segments and an active one, 4 batches of 2 records each, due times
    overlapping across segments; closed cleanly."""
    clock = Clock()
    with Log.open(path, config=CONFIG, clock=clock) as log:
        for s in range(SEALED + 1):
            for b in range(4):
                clock.t = T0 + 10 * (4 * s + b)
                due = T0 + (seed * 7 + s * 13 + b * 29) % 500
                log.append([Record(b"%d-%d-%d" % (s, b, k), key=b"k%d" % k)
                            for k in range(2)], deliver_after=due)
            if s < SEALED:
                log.roll()


def _unmade(log: Log) -> int:
    return sum(seg is None for _, seg in log._segments.made())


def _records(page) -> list[tuple]:
    return [(r.deliver_after, r.offset, r.key, r.value, r.timestamp) for r in page]


def _drain(log: Log) -> list[tuple]:
    out, after = [], None
    while (res := log.fetch(after, max_records=5)).records:
        out += _records(res.records)
        after = res.next
    return out


OPS = st.lists(st.one_of(
    st.tuples(st.just("fetch"), st.integers(1, 9), st.integers(0, 300)),
    st.tuples(st.just("read"), st.integers(0, 60), st.integers(1, 9)),
    st.tuples(st.just("cancel"), st.lists(st.integers(0, 60), max_size=6)),
    st.tuples(st.just("retention"), st.integers(0, 3_000)),
    st.tuples(st.just("compact"), st.integers(0, 3_000)),
    st.tuples(st.just("report")),
    st.tuples(st.just("append"), st.integers(0, 400)),
    st.tuples(st.just("roll")),
), min_size=1, max_size=8)


def _run(log: Log, clock: Clock, ops) -> list:
    """Each op's observable answer (the cursor of a fetch is carried between fetches)."""
    out: list = []
    after = None
    for op in ops:
        kind = op[0]
        if kind == "fetch":
            clock.t += op[2]
            res = log.fetch(after, max_records=op[1])
            after = res.next
            out.append((kind, _records(res.records), res.next))
        elif kind == "read":
            start = max(op[1], log.log_start_offset)
            out.append((kind, _records(log.read(start, max_records=op[2]))))
        elif kind == "cancel":
            out.append((kind, log.cancel([o for o in op[1] if o >= log.log_start_offset])))
        elif kind == "retention":
            clock.t += op[1]
            out.append((kind, log.enforce_retention(), log.segments))
        elif kind == "compact":
            clock.t += op[1]
            res = log.compact()
            out.append((kind, res.segments_rewritten, res.bytes_after, log.segments))
        elif kind == "report":
            report = log.load_report
            out.append((kind, report.problems, report.indexes_rebuilt))
        elif kind == "append":
            out.append((kind, log.append([Record(b"new")], deliver_after=clock.t + op[1])))
        else:
            log.roll()
            out.append((kind, log.segments))
    return out


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 50), ops=OPS)
def test_any_first_touch_after_a_summary_open_answers_as_a_full_open(tmp_path_factory, seed,
                                                                      ops):
    root = tmp_path_factory.mktemp("twins")
    lazy, full = str(root / "lazy"), str(root / "full")
    _write(lazy, seed)
    shutil.copytree(lazy, full)
    os.unlink(os.path.join(full, SUMMARY_FILE))  # the full open: every index at open
    answers, drained = [], []
    for path in (lazy, full):
        clock = Clock()
        with Log.open(path, config=CONFIG, clock=clock) as log:
            if path == lazy:
                assert _unmade(log) == SEALED  # nothing made at open
            else:
                assert _unmade(log) == 0
            answers.append(_run(log, clock, ops))
        with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 7) as log:  # reopened
            drained.append((_drain(log), log.segments, log.load_report.problems))
        assert verify_partition(path).ok
    assert answers[0] == answers[1]
    assert drained[0] == drained[1]


def _expected(path: str) -> list[tuple]:
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 7) as log:
        return _drain(log)


def test_a_file_added_or_removed_after_the_close_opens_segment_by_segment(tmp_path):
    path = str(tmp_path / "p")
    _write(path, 3)
    want = _expected(path)
    base = segment_bases(path)[2]
    for change in ("added", "removed"):
        if change == "added":
            Path(path, "notes.txt").write_bytes(b"not kdelay's")
        else:
            os.unlink(segment_file(path, base, ".timeindex"))
        with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 7) as log:
            assert _unmade(log) == 0  # the listing is not the one the close vouched for
            assert _drain(log) == want
            if change == "removed":
                assert any("rebuilding indexes" in p for p in log.load_report.problems)
        # (each of these closes changed nothing: the summary stays the earlier one)


def test_a_summary_from_an_earlier_close_is_not_trusted(tmp_path):
    path = str(tmp_path / "p")
    _write(path, 5)
    earlier = Path(path, SUMMARY_FILE).read_bytes()
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 6) as log:
        log.append([Record(b"more")], deliver_after=T0)
        log.roll()
        log.append([Record(b"after the roll")], deliver_after=T0 + 1)
    want = _expected(path)
    Path(path, SUMMARY_FILE).write_bytes(earlier)  # stale: one segment fewer, other names
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 7) as log:
        assert _unmade(log) == 0
        assert _drain(log) == want
        assert log.load_report.problems == []


def test_a_damaged_summary_is_not_trusted(tmp_path):
    path = str(tmp_path / "p")
    _write(path, 7)
    want = _expected(path)
    raw = bytearray(Path(path, SUMMARY_FILE).read_bytes())
    raw[-10] ^= 0x40  # inside the recorded listing: the checksum fails
    Path(path, SUMMARY_FILE).write_bytes(bytes(raw))
    with Log.open(path, config=CONFIG, clock=lambda: T0 + 10 ** 7) as log:
        assert _unmade(log) == 0
        assert _drain(log) == want


def test_a_close_after_changes_vouches_again_and_a_crash_never_is_trusted(tmp_path):
    path = str(tmp_path / "p")
    _write(path, 9)
    with Log.open(path, config=CONFIG, clock=lambda: T0) as log:
        log.append([Record(b"x")], deliver_after=T0 + 5)
        log.roll()
    late = T0 + 10 ** 7  # (a crash loses the clock the clean close kept)
    log = Log.open(path, config=CONFIG, clock=lambda: late)
    assert _unmade(log) == SEALED + 1  # the new close vouched for the new listing
    log.append([Record(b"y")], deliver_after=T0 + 6)  # removes the clean-shutdown marker
    want = _drain(log)
    del log  # dropped unclosed, as by a crash: its finalizer only releases descriptors
    gc.collect()
    with Log.open(path, config=CONFIG, clock=lambda: late) as log:
        assert not log.load_report.clean
        assert _unmade(log) == 0
        assert _drain(log) == want
