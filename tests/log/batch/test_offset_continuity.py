"""log/batch/offset_continuity.py: the one rule of offset continuity, as every reader holds
it (Python ints, numpy columns), and the engine's strict scan keeping to it."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdelay import CorruptLogError, Log, LogConfig, Record
from kdelay.log.batch import walker
from kdelay.log.batch.offset_continuity import check_continues, continues, may_skip
from kdelay.log.segments import layout

T0 = 1_700_000_000_000
offsets = st.integers(0, 1 << 62)


@given(offsets, offsets, st.booleans())
def test_a_gap_only_where_skips_are_allowed_and_never_a_step_back(base, expected, skip):
    ok = continues(base, expected, skip)
    if base == expected:
        assert ok
    elif base < expected:
        assert not ok  # a step back, compacted or not
    else:
        assert ok == skip  # a gap: only where compaction may have removed offsets


def test_skips_are_allowed_in_a_compacted_segment_and_where_one_ends():
    # (in a compacted segment, starts a segment, the previous segment is compacted)
    allowed = {(c, s, p): bool(may_skip(c, s, p))
               for c in (False, True) for s in (False, True) for p in (False, True)}
    assert [k for k, v in allowed.items() if v] == [
        (False, True, True), (True, False, False), (True, False, True), (True, True, False),
        (True, True, True)]
    # inside a segment, the segment before being compacted says nothing
    assert not may_skip(False, False, True)


@given(st.lists(st.tuples(offsets, offsets, st.booleans()), min_size=1, max_size=30))
def test_columns_get_the_verdicts_single_batches_get(rows):
    base = np.array([r[0] for r in rows], dtype=np.int64)
    expected = np.array([r[1] for r in rows], dtype=np.int64)
    skip = np.array([r[2] for r in rows], dtype=bool)
    assert continues(base, expected, skip).tolist() == [bool(continues(*r)) for r in rows]


def test_check_continues_names_the_batch():
    check_continues(7, 7, False, "x.log", 0)
    check_continues(9, 7, True, "x.log", 0)
    with pytest.raises(CorruptLogError, match=r"batch base offset 9, expected 7 \(x.log at "
                                              r"byte 120\)"):
        check_continues(9, 7, False, "x.log", 120)
    with pytest.raises(CorruptLogError, match="batch base offset 6, expected 7"):
        check_continues(6, 7, True, "x.log", 120)


def _with_gap(path: str) -> str:
    """A one-segment log whose last batch's base offset is moved on by 3 (the field the
    batch CRC does not cover): a gap no compaction made. Returns the .log's path."""
    with Log.open(path, config=LogConfig(), clock=lambda: T0) as log:
        for i in range(5):
            log.append([Record(b"v%d" % i)])
    log_path = layout.segment_file(path, 0, layout.LOG_SUFFIX)
    fd = os.open(log_path, os.O_RDWR)
    try:
        pos, h = list(walker.iter_headers(fd, log_path, 0, os.fstat(fd).st_size))[-1]
        os.pwrite(fd, (h.base_offset + 3).to_bytes(8, "big"), pos)
    finally:
        os.close(fd)
    return log_path


def test_the_strict_scan_allows_the_gap_only_in_a_compacted_segment(tmp_path):
    log_path = _with_gap(str(tmp_path / "p"))
    fd = os.open(log_path, os.O_RDONLY)
    try:
        plain = walker.scan_log(fd, log_path, 0)
        compacted = walker.scan_log(fd, log_path, 0, gaps=True)
    finally:
        os.close(fd)
    assert "batch base offset 7, expected 4" in str(plain.error) and len(plain.entries) == 4
    assert compacted.error is None and [e[1] for e in compacted.entries] == [0, 1, 2, 3, 7]
