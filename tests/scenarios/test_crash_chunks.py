"""The crash points of test_crash_points.py's scenarios that write index files (roll,
rolls during appends, close, recovery, compaction), with chunks of 2 entries, so that
every index written and reread has many chunks, each checked on first use."""

from __future__ import annotations

import pytest
from conftest import chunks_of
from test_crash_points import CRASH_MODES, _no_real_fsync, run_point  # noqa: F401 (autouse)

SCENARIOS = ["roll", "append_roll", "close", "recovery", "compact"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_crash_point_with_small_chunks(tmp_path, name: str) -> None:
    with chunks_of(2):
        total, crashed = run_point(tmp_path, name, None, "process")
        assert not crashed
        for point in range(total):
            for mode in CRASH_MODES:
                assert run_point(tmp_path, name, point, mode)[1]
